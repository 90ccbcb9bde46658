/**
 * The gateway in front of the real services (auth, storage on the real S3 server, the registry, billing), run as
 * its own process as `pnpm start` runs it: every service's paths through one origin, bodies streamed both ways at
 * constant memory, `Range`, `ETag`/`If-None-Match` and a presigned 307 passed intact, the request ID added.
 */
import { createHash, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import { fileURLToPath } from 'node:url';
import { freePort, type ServerProcess, spawnServer, waitForHttp } from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BillingHarness } from '../../../services/billing/test/support/setup.ts';
import { startService, type TestService } from '../../../services/storage/test/helpers.ts';
import { useAuthAndRegistry } from '../../../tests/support/auth-and-registry.ts';
import { billingWithRegistry } from '../../../tests/support/billing-with-registry.ts';

const platform = useAuthAndRegistry();
let storage: TestService;
let billing: BillingHarness;
let gateway: ServerProcess;
let base: string;

beforeAll(async () => {
  storage = await startService({ listen: true });
  billing = await billingWithRegistry(platform);
  const billingUrl = await billing.app.listen({ host: '127.0.0.1', port: 0 });
  ({ gateway, base } = await startGateway({
    GATEWAY_AUTH_URL: platform.authUrl,
    GATEWAY_STORAGE_URL: storage.url,
    GATEWAY_REGISTRY_URL: platform.registryUrl,
    GATEWAY_BILLING_URL: billingUrl,
  }));
}, 60_000);
afterAll(async () => {
  gateway?.child.kill('SIGTERM');
  await storage?.close();
  await billing?.close();
});

/** A gateway process (as `pnpm start` runs it, from source here) with `env`, once its own /health answers. */
async function startGateway(env: Record<string, string>): Promise<{ gateway: ServerProcess; base: string }> {
  const port = await freePort();
  const gateway = spawnServer('src/server.ts', {
    cwd: fileURLToPath(new URL('..', import.meta.url)),
    env: { ...process.env, PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: 'warn', ...env },
  });
  const base = `http://127.0.0.1:${port}`;
  await waitForHttp(`${base}/health`, gateway, { ok: true });
  return { gateway, base };
}

/** The gateway process's resident memory now and at its peak (kB), from /proc. */
function memoryKb(): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${gateway.child.pid}/status`, 'utf8');
  const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)?.[1]);
  return { rss: field('VmRSS'), peak: field('VmHWM') };
}

describe('the gateway', () => {
  it("routes every service's paths, its own health and each service's, and answers other paths with a problem", async () => {
    expect(await (await fetch(`${base}/health`)).json()).toMatchObject({ status: 'UP' });
    for (const service of ['auth', 'storage', 'provider-registry', 'billing']) {
      const health = await fetch(`${base}/health/${service}`);
      expect(health.status, service).toBe(200);
      expect(await health.json()).toMatchObject({ status: 'UP' });
    }
    // Auth: a sign-up and a login through the gateway; the token then works at the registry and billing behind it.
    const email = `gw-${randomUUID()}@example.com`;
    const password = `Gateway-${randomUUID()}-9!`;
    const registered = await fetch(`${base}/api/v1/auth/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email, password, roles: ['renter'] }),
    });
    expect(registered.status).toBe(201);
    const login = await fetch(`${base}/api/v1/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email, password }),
    });
    const { access_token } = (await login.json()) as { access_token: string };
    const bearer = { authorization: `Bearer ${access_token}` };
    expect((await fetch(`${base}/offers`, { headers: bearer })).status).toBe(200);
    expect((await fetch(`${base}/api/v1/pricing/rates`)).status).toBe(200);
    expect((await fetch(`${base}/api/v1/billing/sessions`, { headers: bearer })).status).toBe(200);
    expect((await fetch(`${base}/.well-known/jwks.json`)).status).toBe(200);
    // A service's problem passes as it is; a path no service has is the gateway's.
    const unauthenticated = await fetch(`${base}/providers`);
    expect(unauthenticated.status).toBe(401);
    expect(unauthenticated.headers.get('content-type')).toContain('application/problem+json');
    const nowhere = await fetch(`${base}/nowhere/at/all?x=1`);
    expect(nowhere.status).toBe(404);
    expect(await nowhere.json()).toMatchObject({ status: 404, code: 'ROUTE_NOT_FOUND', instance: '/nowhere/at/all' });
  });

  it('streams a large upload and download at constant memory, with Range, ETag and If-None-Match intact', async () => {
    const user = await storage.issuer.user(['renter']);
    const size = 128 * 1024 * 1024;
    const chunk = Buffer.alloc(1024 * 1024);
    for (let i = 0; i < chunk.length; i++) chunk[i] = (i * 31) % 251;
    const digest = createHash('sha256');
    let sent = 0;
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (sent >= size) return controller.close();
        digest.update(chunk);
        sent += chunk.length;
        controller.enqueue(new Uint8Array(chunk));
      },
    });
    const before = memoryKb();
    const key = `gateway-${randomUUID()}.bin`;
    const upload = await fetch(`${base}/objects/${key}`, {
      method: 'PUT',
      headers: { ...user.headers, 'content-type': 'application/octet-stream', 'content-length': String(size) },
      body,
      duplex: 'half',
    } as RequestInit);
    expect(upload.status, await upload.clone().text()).toBe(201);
    const expected = digest.digest('hex');

    const download = await fetch(`${base}/objects/${key}`, { headers: user.headers });
    expect(download.status).toBe(200);
    const etag = download.headers.get('etag');
    expect(etag).toBeTruthy();
    const got = createHash('sha256');
    let received = 0;
    for await (const part of download.body as unknown as AsyncIterable<Uint8Array>) {
      got.update(part);
      received += part.length;
    }
    expect(received).toBe(size);
    expect(got.digest('hex')).toBe(expected);
    // 128 MiB up and down: the gateway's memory grew by far less than one copy.
    const after = memoryKb();
    expect(after.peak - before.rss).toBeLessThan(48 * 1024);

    const range = await fetch(`${base}/objects/${key}`, { headers: { ...user.headers, range: 'bytes=1000-1099' } });
    expect(range.status).toBe(206);
    expect(range.headers.get('content-range')).toBe(`bytes 1000-1099/${size}`);
    expect(Buffer.from(await range.arrayBuffer())).toEqual(chunk.subarray(1000, 1100));
    const unchanged = await fetch(`${base}/objects/${key}`, { headers: { ...user.headers, 'if-none-match': etag! } });
    expect(unchanged.status).toBe(304);
  });

  it('takes an upload sent with Expect: 100-continue (curl -T) and answers a service it cannot reach with a 502 problem', async () => {
    const user = await storage.issuer.user(['renter']);
    const key = `gateway-${randomUUID()}.bin`;
    const body = Buffer.alloc(2 * 1024 * 1024, 3);
    const status = await new Promise<number>((resolve, reject) => {
      const req = request(`${base}/objects/${key}`, {
        method: 'PUT',
        headers: {
          ...user.headers,
          'content-type': 'application/octet-stream',
          'content-length': String(body.length),
          expect: '100-continue',
        },
      });
      req.on('continue', () => req.end(body));
      req.on('response', (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
    });
    expect(status).toBe(201);

    // A second gateway whose billing is nowhere (port 9 discards): billing's paths are a 502 problem, the others work.
    const { gateway: lonely, base: other } = await startGateway({ GATEWAY_BILLING_URL: 'http://127.0.0.1:9' });
    try {
      const down = await fetch(`${other}/api/v1/pricing/rates`);
      expect(down.status).toBe(502);
      expect(down.headers.get('content-type')).toContain('application/problem+json');
      const problem = (await down.json()) as { code: string; detail: string };
      expect(problem).toMatchObject({ code: 'BAD_GATEWAY', detail: 'billing did not answer' });
      expect(JSON.stringify(problem)).not.toContain('127.0.0.1');
    } finally {
      lonely.child.kill('SIGTERM');
    }
  });

  it("passes a presigned redirect's Location as it is, and adds or keeps the request ID", async () => {
    const user = await storage.issuer.user(['renter']);
    const key = `gateway-${randomUUID()}.txt`;
    const put = await fetch(`${base}/objects/${key}`, {
      method: 'PUT',
      headers: { ...user.headers, 'content-type': 'text/plain' },
      body: 'through the gateway',
    });
    expect(put.status).toBe(201);
    const redirect = await fetch(`${base}/objects/${key}?redirect=true`, { headers: user.headers, redirect: 'manual' });
    expect(redirect.status).toBe(307);
    const location = redirect.headers.get('location')!;
    // Straight to the store, signed: followed without the gateway or a token.
    expect(location.startsWith(base)).toBe(false);
    expect(await (await fetch(location)).text()).toBe('through the gateway');

    const kept = await fetch(`${base}/api/v1/pricing/rates`, { headers: { 'x-request-id': 'caller-id-42' } });
    expect(kept.headers.get('x-request-id')).toBe('caller-id-42');
    const made = await fetch(`${base}/api/v1/pricing/rates`, { headers: { 'x-request-id': 'not sane \u00e9' } });
    expect(made.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
    const fresh = await fetch(`${base}/health/auth`);
    expect(fresh.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
  });
});
