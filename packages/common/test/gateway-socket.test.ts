/**
 * A service's gateway socket (`server.gateway_socket`, http/gateway-socket.ts): the same app answers on it as on its
 * port; on it alone X-Forwarded-For names the client; its folder must be the user's alone; a socket left by a killed
 * process is taken over, one another process answers on is not.
 */
import { spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { request } from 'node:http';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type App, baseConfigSchema, createApp, createLogger, listenForGateway } from '../src/index.ts';
import { captureLogs } from '../src/testing/index.ts';

const folder = mkdtempSync(path.join(tmpdir(), 'gateway-socket-'));
let app: App;
let url: string;

beforeAll(async () => {
  const config = baseConfigSchema.parse({ access: { enabled: false }, log_level: 'error' });
  const logger = createLogger({
    service: 'test',
    instanceId: 'i-1',
    level: 'error',
    destination: captureLogs().destination,
  });
  app = await createApp({ service: 'test-service', description: 'test', config, logger });
  app.get('/ip', { config: { public: true } }, async (request) => ({ ip: request.clientIp }));
  url = await app.listen({ host: '127.0.0.1', port: 0 });
});
afterAll(async () => {
  await app.close();
  rmSync(folder, { recursive: true, force: true });
});

/** GET /ip over TCP or the socket at `socketPath`, with the given X-Forwarded-For. */
function clientIp(forwardedFor: string, socketPath?: string): Promise<string> {
  const { hostname, port } = new URL(url);
  const where = socketPath ? { socketPath } : { host: hostname, port };
  return new Promise((resolve, reject) => {
    request({ ...where, agent: false, path: '/ip', headers: { 'x-forwarded-for': forwardedFor } }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => {
        text += c;
      });
      res.on('end', () => resolve((JSON.parse(text) as { ip: string }).ip));
    })
      .on('error', reject)
      .end();
  });
}

describe('a gateway socket', () => {
  it('names the client by X-Forwarded-For there alone (its last address), never over TCP', async () => {
    const socketPath = path.join(folder, 'service.sock');
    const server = await listenForGateway(app, socketPath);
    try {
      expect(statSync(socketPath).mode & 0o777).toBe(0o600);
      expect(await clientIp('203.0.113.7', socketPath)).toBe('203.0.113.7');
      expect(await clientIp('198.51.100.1, 203.0.113.8', socketPath)).toBe('203.0.113.8');
      expect(await clientIp('203.0.113.7')).toBe('127.0.0.1');
    } finally {
      await new Promise((r) => server.close(r));
    }
    expect(existsSync(socketPath)).toBe(false);
  });

  it("refuses a folder others can open, and a socket another process answers on; takes over a killed one's", async () => {
    const open = path.join(folder, 'open');
    mkdirSync(open, { mode: 0o755 });
    chmodSync(open, 0o755);
    await expect(listenForGateway(app, path.join(open, 'service.sock'))).rejects.toThrow(
      /must be this user's alone \(mode 0700\), not mode 755/,
    );

    const taken = path.join(folder, 'taken.sock');
    const other = createServer().listen(taken);
    await new Promise((r) => other.once('listening', r));
    await expect(listenForGateway(app, taken)).rejects.toThrow(/another process answers on/);
    await new Promise((r) => other.close(r));

    // A process killed while it listened leaves its socket file behind.
    const stale = path.join(folder, 'stale.sock');
    const killed = spawn(process.execPath, [
      '-e',
      `require('net').createServer().listen(${JSON.stringify(stale)}, () => console.log('up'))`,
    ]);
    await new Promise((r) => killed.stdout.once('data', r));
    killed.kill('SIGKILL');
    await new Promise((r) => killed.once('exit', r));
    expect(existsSync(stale)).toBe(true);
    const server = await listenForGateway(app, stale);
    expect(await clientIp('203.0.113.9', stale)).toBe('203.0.113.9');
    await new Promise((r) => server.close(r));
  });
});
