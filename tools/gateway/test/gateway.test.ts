/**
 * The platform's one origin in front of the real services (auth, storage on the real S3 server, the registry,
 * billing), for each engine that provides it: `pnpm start`'s gateway (tools/gateway, its own process as `pnpm start`
 * runs it) and docker-compose's nginx (deploy/gateway's files, run by Debian's nginx). Every service's paths through
 * one origin and nothing else, bodies streamed both ways at constant memory, `Range`, `ETag`/`If-None-Match` and a
 * presigned 307 passed intact, the request ID added, problems in the platform's shape.
 */
import { createHash, randomUUID } from 'node:crypto';
import { createServer, request } from 'node:http';
import { type AddressInfo, connect } from 'node:net';
import { freePort } from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BillingHarness } from '../../../services/billing/test/support/setup.ts';
import { memoryKiB } from '../../../services/storage/bench/service-process.ts';
import { rawRequest, startService, type TestService } from '../../../services/storage/test/helpers.ts';
import { useAuthAndRegistry } from '../../../tests/support/auth-and-registry.ts';
import { billingWithRegistry } from '../../../tests/support/billing-with-registry.ts';
import {
  type RunningGateway,
  startComposeNginx,
  startNodeGateway,
  startPlatformNginxGateway,
  startReceiver,
  type Upstreams,
} from './gateways.ts';
import { startNginx } from './nginx.ts';

/** A gateway's own answer to a body larger than the path's service takes (the same from every engine). */
const GATEWAY_TOO_LARGE = 'the body is larger than the service behind this path takes';

const platform = useAuthAndRegistry();
let storage: TestService;
let billing: BillingHarness;
let billingUrl: string;

beforeAll(async () => {
  storage = await startService({ listen: true });
  billing = await billingWithRegistry(platform);
  billingUrl = await billing.app.listen({ host: '127.0.0.1', port: 0 });
}, 60_000);
afterAll(async () => {
  await storage?.close();
  await billing?.close();
});

/** The four services' base URLs, some of them replaced. */
const upstreams = (replace: Upstreams = {}): Required<Upstreams> => ({
  auth: platform.authUrl,
  storage: storage.url,
  'provider-registry': platform.registryUrl,
  billing: billingUrl,
  ...replace,
});

interface Engine {
  name: string;
  /** Started in front of `upstreams`; with `operators`, those addresses alone may read `/health/<service>`. */
  start: (upstreams: Upstreams, opts?: { operators?: readonly string[] }) => Promise<RunningGateway>;
  /** Whether it also serves the object store where presigned URLs point (compose's nginx, port 9000). */
  servesObjectStore: boolean;
}

const engines: Engine[] = [
  {
    name: "pnpm start's gateway (@fastify/http-proxy)",
    servesObjectStore: false,
    start: (to, opts) => startNodeGateway(to, opts),
  },
  { name: "docker-compose's nginx (deploy/gateway)", servesObjectStore: true, start: startComposeNginx },
  {
    name: "pnpm start's nginx (deploy/gateway, tools/gateway/src/nginx.ts)",
    servesObjectStore: false,
    start: (to, opts) => startPlatformNginxGateway(to, opts),
  },
];

/** The answer to `text`, written on a connection of its own as is, read until the gateway closes it. */
function rawExchange(
  base: string,
  text: string,
): Promise<{ status: number; headers: Record<string, string>; body: string; raw: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect(Number(new URL(base).port), '127.0.0.1', () => socket.write(text));
    let raw = '';
    socket.setTimeout(10_000, () => socket.destroy());
    socket.on('data', (d: Buffer) => {
      raw += d;
    });
    socket.on('close', () => {
      const [head = '', ...rest] = raw.split('\r\n\r\n');
      const [statusLine = '', ...lines] = head.split('\r\n');
      const headers = Object.fromEntries(
        lines.map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]),
      );
      resolve({ status: Number(statusLine.split(' ')[1]), headers, body: rest.join('\r\n\r\n'), raw });
    });
    socket.on('error', reject);
  });
}

describe.each(engines)('the gateway: $name', (engine) => {
  let gateway: RunningGateway;
  let base: string;
  beforeAll(async () => {
    gateway = await engine.start(upstreams());
    base = gateway.base;
  });
  afterAll(async () => {
    await gateway?.stop();
  });

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
    const size = 256 * 1024 * 1024;
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
    const before = gateway.pids().map((pid) => ({ pid, ...memoryKiB(pid) }));
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
    // 256 MiB up and down: no process of the gateway's grew by half of one copy. (What a Node gateway grows by is its
    // heap's slack, the same whatever the size: 60-90 MB on Node 24 for 64 MiB and for 256 MiB alike.)
    for (const { pid, rss } of before)
      expect(memoryKiB(pid).peak - rss, `process ${pid}`).toBeLessThan(size / 2 / 1024);

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
    const lonely = await engine.start(upstreams({ billing: 'http://127.0.0.1:9' }));
    try {
      const down = await fetch(`${lonely.base}/api/v1/pricing/rates`);
      expect(down.status).toBe(502);
      expect(down.headers.get('content-type')).toContain('application/problem+json');
      const problem = (await down.json()) as { code: string; detail: string };
      expect(problem).toMatchObject({ code: 'BAD_GATEWAY', detail: 'billing did not answer' });
      expect(JSON.stringify(problem)).not.toContain('127.0.0.1');
    } finally {
      await lonely.stop();
    }
  });

  it("answers a body too large with a 413 problem every time, never a 502: its own limit first, else the service's", async () => {
    // A storage that takes objects of at most 1 MiB, behind a second gateway of the same engine.
    const small = await startService({ listen: true, objectStore: { max_upload_size: 1024 * 1024 } });
    const front = await engine.start(upstreams({ storage: small.url }));
    const user = await small.issuer.user(['renter']);
    const targets = [
      { path: '/api/v1/pricing/calculate', headers: {} },
      { path: '/api/v1/auth/register', headers: {} },
      { path: '/objects/too-large.bin', headers: user.headers, method: 'PUT' },
    ];
    const wrong: string[] = [];
    try {
      // 48 bodies of 1-3 MiB: to two JSON routes (billing's quote, auth's sign-up; 1 MiB at most) and to an object
      // upload past storage's max_upload_size, half with a Content-Length and half streamed (chunked).
      for (let i = 0; i < 48; i++) {
        const target = targets[i % 3]!;
        const chunked = Math.floor(i / 3) % 2 === 1;
        const size = 1024 * 1024 + 1 + Math.floor((i / 47) * 2 * 1024 * 1024);
        const bytes = Buffer.alloc(size, 0x20);
        const body = chunked
          ? new ReadableStream<Uint8Array>({
              start(controller) {
                for (let at = 0; at < size; at += 64 * 1024) controller.enqueue(bytes.subarray(at, at + 64 * 1024));
                controller.close();
              },
            })
          : bytes;
        const what = `${target.path}, ${size} bytes${chunked ? ' chunked' : ''}`;
        try {
          const res = await fetch(`${front.base}${target.path}`, {
            method: target.method ?? 'POST',
            headers: { ...target.headers, 'content-type': 'application/json' },
            body,
            duplex: 'half',
          } as RequestInit);
          const problem = (await res.json()) as { code?: string; detail?: string };
          const type = res.headers.get('content-type') ?? '';
          if (res.status !== 413 || problem.code !== 'PAYLOAD_TOO_LARGE' || !type.includes('application/problem+json'))
            wrong.push(`${what}: ${res.status} ${problem.code} ${problem.detail}`);
          // A JSON route's declared body is the gateway's to refuse, before the service sees it.
          else if (!chunked && !target.method && problem.detail !== GATEWAY_TOO_LARGE)
            wrong.push(`${what}: refused by the service, not the gateway (${problem.detail})`);
        } catch (err) {
          wrong.push(`${what}: ${(err as Error).message} ${String((err as Error).cause)}`);
        }
      }
    } finally {
      await front.stop();
      await small.close();
    }
    expect(wrong).toEqual([]);
  });

  it('answers an HTTP/1.0 caller that writes no Host, as the service would', { timeout: 10_000 }, async () => {
    const { port } = new URL(base);
    // Written as such a caller does; read until the answer's body is whole (its Content-Length).
    const answer = await new Promise<string>((resolve, reject) => {
      const socket = connect(Number(port), '127.0.0.1', () =>
        socket.write('GET /api/v1/pricing/rates HTTP/1.0\r\n\r\n'),
      );
      let text = '';
      socket.on('data', (d: Buffer) => {
        text += d;
        const [head, body = ''] = text.split('\r\n\r\n');
        const length = /\r\ncontent-length: (\d+)/i.exec(head ?? '')?.[1];
        if (length !== undefined && Buffer.byteLength(body) >= Number(length)) {
          socket.destroy();
          resolve(text);
        }
      });
      socket.on('end', () => resolve(text));
      socket.on('error', reject);
    });
    expect(answer.split('\r\n')[0]).toMatch(/^HTTP\/1\.[01] 200 /);
    expect(answer).toContain('"base_rates"');
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
  it("carries the caller's X-Correlation-ID, or a new one, on its own answers and on to the service", async () => {
    // A second gateway of the engine whose billing is nowhere, and whose operators are elsewhere: its own 502 and 403.
    const own = await engine.start(upstreams({ billing: 'http://127.0.0.1:9' }), { operators: ['127.0.0.2'] });
    try {
      let sent: Record<string, string> = { 'x-correlation-id': 'caller-chain:42' };
      const answers: [string, () => Promise<Response>][] = [
        ['its health', () => fetch(`${own.base}/health`, { headers: sent })],
        ['a path no service has (404)', () => fetch(`${own.base}/nowhere`, { headers: sent })],
        ['a dot segment (400)', () => fetch(`${own.base}/objects/%2e%2e/metrics`, { headers: sent })],
        ['a service it cannot reach (502)', () => fetch(`${own.base}/api/v1/pricing/rates`, { headers: sent })],
        ["a service's health to a stranger (403)", () => fetch(`${own.base}/health/auth`, { headers: sent })],
        [
          'a body too large (413)',
          () =>
            fetch(`${own.base}/api/v1/auth/login`, {
              method: 'POST',
              headers: { ...sent, 'content-type': 'application/json' },
              body: Buffer.alloc(2 * 1024 * 1024, 32),
            }),
        ],
        ['a service answering (auth, 401)', () => fetch(`${own.base}/api/v1/auth/me`, { headers: sent })],
      ];
      for (const [what, ask] of answers) {
        const res = await ask();
        await res.arrayBuffer();
        expect(res.headers.get('x-correlation-id'), what).toBe('caller-chain:42');
      }
      for (const insane of [{ 'x-correlation-id': 'not sane \u00e9' }, { 'x-correlation-id': 'x'.repeat(129) }, {}]) {
        sent = insane as Record<string, string>;
        for (const [what, ask] of answers) {
          const res = await ask();
          await res.arrayBuffer();
          expect(res.headers.get('x-correlation-id'), `${what}, sent ${JSON.stringify(insane).slice(0, 40)}`).toMatch(
            /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/,
          );
        }
      }
    } finally {
      await own.stop();
    }
  });

  it("sends the service the caller's trace with the gateway's own draw in its tracestate, never the caller's", async () => {
    // An auth that answers the trace headers it got (this process does not trace: the Node gateway passes the
    // caller's context on, nginx sends its own span's).
    const echo = createServer((req, res) => {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ traceparent: req.headers.traceparent, tracestate: req.headers.tracestate }));
    });
    await new Promise<void>((resolve) => echo.listen(0, '127.0.0.1', resolve));
    const own = await engine.start(upstreams({ auth: `http://127.0.0.1:${(echo.address() as AddressInfo).port}` }));
    try {
      const seen = async (tracestate: string) => {
        const res = await fetch(`${own.base}/.well-known/jwks.json`, {
          headers: { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', tracestate },
        });
        expect(res.status).toBe(200);
        return (await res.json()) as { traceparent: string; tracestate: string };
      };
      // A caller with randomness of its own (the highest: always kept): the service gets the gateway's draw instead,
      // first; the caller's other entries follow it (the Node gateway) or, beside an `ot` entry, are not sent (nginx).
      const draws = new Set<string>();
      for (let i = 0; i < 3; i++) {
        const got = await seen('ot=rv:ffffffffffffff,vendor=theirs');
        expect(got.traceparent).toMatch(/^00-0af7651916cd43dd8448eb211c80319c-[0-9a-f]{16}-[0-9a-f]{2}$/);
        const draw = /^ot=rv:([0-9a-f]{14})(,vendor=theirs)?$/.exec(got.tracestate)?.[1];
        expect(draw, got.tracestate).toBeDefined();
        draws.add(draw!);
      }
      expect(draws.has('ffffffffffffff')).toBe(false);
      // A fresh draw for each request.
      expect(draws.size).toBe(3);
      // A caller's entries of other vendors follow the gateway's.
      expect((await seen('vendor=theirs')).tracestate).toMatch(/^ot=rv:[0-9a-f]{14},vendor=theirs$/);
      // Randomness of the caller's that a parser would read after the gateway's (a later entry with the same key wins
      // in OpenTelemetry's), however it is spaced: never sent on.
      for (const sneaky of ['vendor=theirs,\u00a0ot=rv:ffffffffffffff', 'vendor=theirs, \tot=rv:ffffffffffffff']) {
        const got = await seen(sneaky);
        expect(got.tracestate, JSON.stringify(sneaky)).toMatch(/^ot=rv:[0-9a-f]{14}(,vendor=theirs)?$/);
      }
      // A full list (32 entries) still gets the gateway's first.
      const full = Array.from({ length: 32 }, (_, i) => `v${i}=x`).join(',');
      expect((await seen(full)).tracestate).toMatch(/^ot=rv:[0-9a-f]{14}(,|$)/);
    } finally {
      await own.stop();
      await new Promise((resolve) => echo.close(resolve));
    }
  });

  it("forwards nothing outside the route table: no service's /metrics, no docs, no way around by dot segments", async () => {
    for (const path of ['/docs', '/objectsx', '/grants', '/metricsx']) {
      const res = await rawRequest(base, 'GET', path);
      expect(res.status, path).toBe(404);
      expect(JSON.parse(res.body), path).toMatchObject({ code: 'ROUTE_NOT_FOUND' });
    }
    // A `..` segment, plain or percent-encoded, under a service's prefix is the gateway's own 400: no service sees it.
    for (const path of [
      '/objects/../metrics',
      '/objects/%2e%2e/metrics',
      '/objects/a/../b',
      '/objects/a/..',
      '/api/v1/billing/../../../metrics',
      '/providers/..%2f..%2fmetrics',
    ]) {
      const res = await rawRequest(base, 'GET', path);
      expect(res.status, `${path}: ${res.body}`).toBe(400);
      expect(res.headers['content-type'], path).toContain('application/problem+json');
      expect(JSON.parse(res.body), path).toMatchObject({ status: 400, code: 'BAD_REQUEST' });
    }
    // Nor under no prefix, whichever location its resolved form would choose (`/docs/..%2Fobjects` resolves to
    // storage's `/objects`): the gateway's own 400, or its 404 (the Node gateway matches the path as written).
    for (const path of ['/docs/..%2Fobjects', '/grants/%2E%2e/objects?x=1', '/..%2fobjects']) {
      const res = await rawRequest(base, 'GET', path);
      const body = JSON.parse(res.body) as { status: number; code: string; detail: string };
      if (res.status === 404)
        expect(body, path).toMatchObject({ code: 'ROUTE_NOT_FOUND', detail: /no service answers/ });
      else expect(body, `${path}: ${res.status}`).toMatchObject({ status: 400, code: 'BAD_REQUEST' });
    }
    // A `.` segment too: resolved, `/objects/b/dir/./k` would name another object (`dir/k`).
    for (const path of ['/objects/b/dir/./file.txt', '/objects/b/dir/%2E', '/objects/b/%2e/k', '/objects/.']) {
      const res = await rawRequest(base, 'PUT', path, 'x', { 'content-type': 'text/plain' });
      expect(res.status, `${path}: ${res.body}`).toBe(400);
      expect(JSON.parse(res.body), path).toMatchObject({ status: 400, code: 'BAD_REQUEST' });
    }
    // Dots that are no segment of their own pass to the service as written.
    const dotted = await rawRequest(base, 'GET', '/objects/a..b');
    expect(dotted.status).toBe(401);
    // A key whose slashes are encoded is one segment, as the client sends keys: `runs/./x.bin` reaches storage.
    for (const path of ['/objects/.a', '/objects/a./b', '/objects/b/runs%2F.%2Fx.bin', '/objects/b/runs%2F%2E%2Fx']) {
      expect((await rawRequest(base, 'GET', path)).status, path).toBe(401);
    }
    // Nothing under a service's health: `/health/<service>` alone.
    for (const path of ['/health/auth/x', '/health/billing/']) {
      const res = await rawRequest(base, 'GET', path);
      expect(res.status, path).toBe(404);
    }
  });

  it('sends no hop-by-hop header on, and fails none of them as a service not reached', async () => {
    for (const headers of [
      { 'keep-alive': 'timeout=5' } as Record<string, string>,
      { connection: 'keep-alive', upgrade: 'h2c' },
      { 'proxy-connection': 'keep-alive' },
      { te: 'gzip' },
    ]) {
      const res = await rawRequest(base, 'GET', '/api/v1/pricing/rates', undefined, headers);
      const what = `${JSON.stringify(headers)}: ${res.status} ${res.body}`;
      // Served (200), or the engine's own 400: never the gateway's 502 for a service it did reach.
      expect([200, 400], what).toContain(res.status);
    }
  });

  it('answers what it cannot read with a problem and IDs, never a bare error', async () => {
    for (const [what, text] of [
      ['a path that is no percent-encoding', 'GET /objects/%zz HTTP/1.1\r\nHost: x\r\n\r\n'],
      [
        'two lengths',
        'POST /api/v1/pricing/calculate HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab',
      ],
      [
        'a length beside chunks',
        'POST /api/v1/pricing/calculate HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n',
      ],
    ] as const) {
      const answer = await rawExchange(base, text);
      expect(answer.status, `${what}: ${answer.raw}`).toBe(400);
      expect(answer.headers['content-type'], what).toContain('application/problem+json');
      expect(JSON.parse(answer.body), what).toMatchObject({ status: 400, code: 'BAD_REQUEST' });
      expect(answer.headers['x-request-id'], what).toMatch(/^[0-9a-f-]{36}$/);
    }
  });

  it('counts each answer in its own metrics, by upstream, route and status, served to operators only', async () => {
    const id = `metrics-${randomUUID()}`;
    expect((await fetch(`${base}/api/v1/pricing/rates`, { headers: { 'x-request-id': id } })).status).toBe(200);
    expect((await fetch(`${base}/nowhere`)).status).toBe(404);
    const series = (text: string, name: string, labels: string) =>
      Number(new RegExp(`^${name}\\{${labels}\\} (\\d+)$`, 'm').exec(text)?.[1] ?? 0);
    const rates = 'upstream="billing",method="GET",route="/api/v1/pricing/\\*",status_code="200"';
    const unmatched = 'upstream="gateway",method="GET",route="unmatched",status_code="404"';
    // nginx's lines reach its telemetry receiver a moment after the answer.
    let text = '';
    await expect
      .poll(
        async () => {
          const res = await fetch(`${base}/metrics`);
          expect(res.status).toBe(200);
          text = await res.text();
          return Math.min(
            series(text, 'gateway_requests_total', rates),
            series(text, 'gateway_requests_total', unmatched),
          );
        },
        { timeout: 10_000 },
      )
      .toBeGreaterThanOrEqual(1);
    expect(series(text, 'gateway_request_duration_seconds_count', rates)).toBeGreaterThanOrEqual(1);
    expect(text).toMatch(/^gateway_request_duration_seconds_bucket\{[^}]*le="0\.1"[^}]*\} \d+$/m);
    // The gateway's own metrics, never a service's.
    expect(text).not.toContain('http_requests_total');

    // Anyone but an operator is refused (here 127.0.0.2 is the operators' network and 127.0.0.1 is not).
    const guarded = await engine.start(upstreams(), { operators: ['127.0.0.2'] });
    try {
      const denied = await fetch(`${guarded.base}/metrics`);
      expect(denied.status).toBe(403);
      expect(denied.headers.get('content-type')).toContain('application/problem+json');
      expect(await denied.json()).toMatchObject({
        status: 403,
        code: 'OPERATORS_ONLY',
        detail: "the gateway's metrics are for operators only",
      });
    } finally {
      await guarded.stop();
    }
  });

  it("answers a service's health to operators only, in the problem shape", async () => {
    // Here 127.0.0.2 is the operators' network and 127.0.0.1 is not.
    const guarded = await engine.start(upstreams(), { operators: ['127.0.0.2'] });
    try {
      for (const service of ['auth', 'storage', 'provider-registry', 'billing']) {
        // An operator's address written into X-Forwarded-For by anyone else does not make it one.
        const denied = await fetch(`${guarded.base}/health/${service}`, {
          headers: { 'x-forwarded-for': '127.0.0.2' },
        });
        expect(denied.status, service).toBe(403);
        expect(denied.headers.get('content-type')).toContain('application/problem+json');
        expect(await denied.json()).toMatchObject({
          title: 'Forbidden',
          status: 403,
          code: 'OPERATORS_ONLY',
          detail: "a service's health is for operators only",
          instance: `/health/${service}`,
        });
        const allowed = await new Promise<number>((resolve, reject) => {
          request(`${guarded.base}/health/${service}`, { localAddress: '127.0.0.2' }, (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          })
            .on('error', reject)
            .end();
        });
        expect(allowed, service).toBe(200);
      }
      // The API and the gateway's own health are for everyone.
      expect((await fetch(`${guarded.base}/api/v1/pricing/rates`)).status).toBe(200);
      expect((await fetch(`${guarded.base}/health`)).status).toBe(200);
    } finally {
      await guarded.stop();
    }
  });

  it.runIf(engine.servesObjectStore)(
    'serves the object store where presigned URLs point, their signature intact, and logs each request ID',
    async () => {
      const port = await freePort();
      const s3 = new URL(`http://${storage.config.object_store.endpoint.replace(/^https?:\/\//, '')}`);
      const behind = await startService({ listen: true, objectStore: { public_endpoint: `http://127.0.0.1:${port}` } });
      const receiver = await startReceiver();
      const nginx = await startNginx({
        upstreams: { ...upstreams({ storage: behind.url }), minio: s3.origin, 'gateway-telemetry': receiver.metricsAt },
        telemetrySyslog: `127.0.0.1:${receiver.syslogPort}`,
        objectStorePort: port,
      });
      try {
        const user = await behind.issuer.user(['renter']);
        const key = `gateway-${randomUUID()}.txt`;
        const put = await fetch(`${nginx.base}/objects/${key}`, {
          method: 'PUT',
          headers: { ...user.headers, 'content-type': 'text/plain', 'x-request-id': `upload-${key}` },
          body: 'through the gateway, twice',
        });
        expect(put.status).toBe(201);
        const redirect = await fetch(`${nginx.base}/objects/${key}?redirect=true`, {
          headers: user.headers,
          redirect: 'manual',
        });
        expect(redirect.status).toBe(307);
        const location = redirect.headers.get('location')!;
        expect(location.startsWith(`http://127.0.0.1:${port}/`)).toBe(true);
        expect(await (await fetch(location)).text()).toBe('through the gateway, twice');
        // A changed URL is refused by the store: the signature covers what the gateway passed on.
        const forged = new URL(location);
        forged.pathname = `${forged.pathname}x`;
        expect((await fetch(forged)).status).toBe(403);
        // MinIO's admin API is not the public's: the gateway answers it itself, never the store.
        for (const path of ['/minio/admin/v3/info', '/minio/v2/metrics/cluster', '/%6Dinio/admin/v3/info']) {
          const admin = await fetch(`http://127.0.0.1:${port}${path}`);
          expect(admin.status, path).toBe(404);
          expect(await admin.text(), path).not.toContain('<Error>');
        }
        const logged = nginx.accessLog().map((line) => JSON.parse(line) as { request_id: string; status: number });
        expect(logged).toContainEqual(expect.objectContaining({ request_id: `upload-${key}`, status: 201 }));
        // Each line names the request's trace and the gateway's span in it, as the services' lines do.
        for (const line of logged) {
          expect(line).toMatchObject({ trace_id: expect.stringMatching(/^[0-9a-f]{32}$/) });
          expect(line).toMatchObject({ span_id: expect.stringMatching(/^[0-9a-f]{16}$/) });
        }
      } finally {
        await nginx.stop();
        await receiver.close();
        await behind.close();
      }
    },
  );
});
