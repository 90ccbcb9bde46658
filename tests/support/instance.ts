/**
 * One service process on a fixed port, which a test can kill (SIGKILL: a crash; SIGTERM: a graceful stop) and start
 * again on the same port, with the same environment: an instance behind a load balancer, for tests that run several.
 *
 *   const a = new Instance('a', await freePort(), env, serviceDir);
 *   await a.start();            // resolves once /health answers 2xx
 *   await a.kill('SIGKILL');
 */
import { type ServerProcess, spawnServer, waitForHttp } from '@gpu/common/testing';

export class Instance {
  proc?: ServerProcess;
  /** Whether the test client sends it requests (a load balancer's view: false once it refused or went away). */
  up = false;
  constructor(
    readonly name: string,
    readonly port: number,
    private readonly env: NodeJS.ProcessEnv,
    /** The service's folder (its `src/server.ts` is started there). */
    private readonly cwd: string,
  ) {}
  get url() {
    return `http://127.0.0.1:${this.port}`;
  }
  async start() {
    this.proc = spawnServer('src/server.ts', { cwd: this.cwd, env: { ...this.env, PORT: String(this.port) } });
    await waitForHttp(`${this.url}/health`, this.proc, { ok: true, timeoutMs: 60_000 });
    this.up = true;
  }
  /** Whether its process is running (started, and not exited). */
  alive(): boolean {
    return this.proc !== undefined && this.proc.child.exitCode === null && this.proc.child.signalCode === null;
  }
  /** Sends `signal` and resolves when the process has exited. */
  async kill(signal: NodeJS.Signals) {
    this.up = false;
    if (!this.proc || this.proc.child.exitCode !== null || this.proc.child.signalCode !== null) return;
    this.proc.child.kill(signal);
    await this.proc.exited;
  }
}
