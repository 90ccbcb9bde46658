/**
 * A NATS server (JetStream on, Debian's nats-server) of a test's own, so the test can stop and start it (a real
 * outage) without disturbing the shared test server. Restarted, it keeps its port and its streams.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type ServerProcess, spawnProcess, waitForTcp } from '@gpu/common/testing';

export class DedicatedNats {
  private readonly dir = mkdtempSync(join(tmpdir(), 'registry-nats-'));
  private server?: ServerProcess;

  constructor(readonly port: number) {}

  get url(): string {
    return `nats://127.0.0.1:${this.port}`;
  }

  /** Starts the server and waits (up to 30 s) until it takes connections. */
  async start(): Promise<void> {
    const server = spawnProcess(
      'nats-server',
      ['-js', '-sd', join(this.dir, 'store'), '-a', '127.0.0.1', '-p', String(this.port)],
      { env: process.env },
    );
    this.server = server;
    await waitForTcp(this.port, server);
  }

  /** Stops the server and waits for it to exit. */
  async stop(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    if (!server || server.child.exitCode !== null) return;
    server.child.kill('SIGTERM');
    await server.exited;
  }

  async destroy(): Promise<void> {
    await this.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
