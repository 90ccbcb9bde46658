/**
 * Whose address a service counts behind each gateway: only the gateway's own hop may name the client. A caller's
 * `X-Forwarded-For` is replaced by the address the gateway saw (`pnpm start`'s gateway and compose's nginx alike),
 * so auth's per-address limits (sign-ups per hour, failed logins per minute) bite however many addresses a caller
 * writes there; and under `pnpm start`'s arrangement, where every caller comes from 127.0.0.1 as the gateway does,
 * a service believes the header only on its gateway socket, never from a caller over TCP. Real auth services (their
 * own database each, limits on), real gateways, requests from 127.0.0.1 (and 127.0.0.2).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { listenForGateway } from '@gpu/common';
import { afterAll, describe, expect, it } from 'vitest';
import {
  freshDatabase,
  GOOD_PASSWORD,
  startAuth,
  type TestAuth,
  testConfig,
  uniqueEmail,
} from '../../../services/auth/test/helpers.ts';
import { type RunningGateway, startComposeNginx, startNodeGateway, startPlatformNginxGateway } from './gateways.ts';

/** An auth service listening on loopback with its limits per address on: 3 sign-ups an hour, 5 failed logins a minute. */
async function limitedAuth(server: Record<string, unknown>) {
  const database = await freshDatabase();
  const auth: TestAuth = await startAuth(
    database.db,
    testConfig({
      log_level: 'warn',
      server,
      rate_limit: { enabled: true, register_per_ip: '3/1h', login_per_ip: '5/1m', login_per_account: '100/15m' },
    }),
  );
  const url = await auth.app.listen({ host: '127.0.0.1', port: 0 });
  return {
    auth,
    url,
    close: async () => {
      await auth.close();
      await database.close();
    },
  };
}

/** A POST of JSON from `localAddress` (127.0.0.1 unless given), answering its status and problem code. */
function post(
  base: string,
  path: string,
  body: unknown,
  headers: Record<string, string>,
  localAddress = '127.0.0.1',
): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request(`${base}${path}`, {
      method: 'POST',
      localAddress,
      headers: { ...headers, 'content-type': 'application/json' },
    });
    req.on('response', (res) => {
      let text = '';
      res.on('data', (c: Buffer) => {
        text += c;
      });
      res.on('end', () => resolve(`${res.statusCode} ${(JSON.parse(text) as { code?: string }).code ?? ''}`.trim()));
    });
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

/** `count` sign-ups, each claiming a new address in X-Forwarded-For. */
async function signUps(base: string, count: number): Promise<string[]> {
  const answers: string[] = [];
  for (let i = 1; i <= count; i++) {
    const forged = { 'x-forwarded-for': `203.0.113.${i}` };
    answers.push(await post(base, '/api/v1/auth/register', { email: uniqueEmail(), password: GOOD_PASSWORD }, forged));
  }
  return answers;
}

/** `count` logins with a wrong password (each for another email), each claiming a new address. */
async function wrongLogins(base: string, count: number, localAddress?: string): Promise<string[]> {
  const answers: string[] = [];
  for (let i = 1; i <= count; i++) {
    const forged = { 'x-forwarded-for': `198.51.100.${i}` };
    const body = { email: uniqueEmail('ghost'), password: 'not the password at all' };
    answers.push(await post(base, '/api/v1/auth/login', body, forged, localAddress));
  }
  return answers;
}

const LIMITED_SIGN_UPS = ['201', '201', '201', '429 RATE_LIMITED'];
const LIMITED_LOGINS = [...Array(5).fill('401 INVALID_CREDENTIALS'), '429 RATE_LIMITED'];

const engines: { name: string; start: (authUrl: string) => Promise<RunningGateway> }[] = [
  { name: "pnpm start's gateway (@fastify/http-proxy)", start: (auth) => startNodeGateway({ auth }) },
  { name: "docker-compose's nginx (deploy/gateway)", start: (auth) => startComposeNginx({ auth }) },
];

describe.each(engines)('the client address through $name', (engine) => {
  it("replaces a forged X-Forwarded-For with the caller's address: auth's limits per address bite", async () => {
    // Auth believes the gateway's address (on this machine 127.0.0.1; compose gives nginx an address of its own).
    const limited = await limitedAuth({ trusted_proxies: ['127.0.0.1'] });
    const gateway = await engine.start(limited.url);
    try {
      expect(await signUps(gateway.base, 4)).toEqual(LIMITED_SIGN_UPS);
      expect(await wrongLogins(gateway.base, 6)).toEqual(LIMITED_LOGINS);
    } finally {
      await gateway.stop();
      await limited.close();
    }
  });
});

const startEngines: { name: string; start: (socketDir: string) => Promise<RunningGateway> }[] = [
  { name: 'its Node gateway', start: (socketDir) => startNodeGateway({}, { socketDir }) },
  { name: 'its nginx (deploy/gateway)', start: (socketDir) => startPlatformNginxGateway({}, { socketDir }) },
];

describe.each(startEngines)(
  "pnpm start's arrangement with $name: the services believe X-Forwarded-For on their gateway socket only",
  (engine) => {
    const folder = mkdtempSync(path.join(tmpdir(), 'gateway-sockets-'));
    afterAll(() => rmSync(folder, { recursive: true, force: true }));

    it('counts a direct caller by its own address and a caller through the gateway by the one the gateway saw', async () => {
      // As pnpm start runs auth: no trusted proxy, and a socket in a folder of this user's alone for the gateway.
      const limited = await limitedAuth({});
      const socket = await listenForGateway(limited.auth.app, path.join(folder, 'auth.sock'));
      const gateway = await engine.start(folder);
      try {
        // Straight to the service from 127.0.0.1, each request naming a new address: not believed.
        expect(await signUps(limited.url, 4)).toEqual(LIMITED_SIGN_UPS);
        // Through the gateway: each forged address replaced by 127.0.0.1's, limited too ...
        expect(await wrongLogins(gateway.base, 6)).toEqual(LIMITED_LOGINS);
        // ... and the address the gateway wrote is the one counted: a caller from 127.0.0.2 is another client.
        expect(await wrongLogins(gateway.base, 1, '127.0.0.2')).toEqual(['401 INVALID_CREDENTIALS']);
      } finally {
        await gateway.stop();
        socket.close();
        await limited.close();
      }
    });
  },
);
