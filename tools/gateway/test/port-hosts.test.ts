/**
 * Port hosts (`<session-uuid>-<port>.ports.<domain>`, src/routes.ts `PORT_HOST`) through each gateway engine that
 * runs here: pnpm start's Node gateway (its own process, on the services' gateway sockets as pnpm start runs it, and
 * at their URLs), pnpm start's nginx (gateway sockets) and docker-compose's nginx (deploy/gateway's files, Debian's
 * nginx). The services are recording HTTP and WebSocket servers: billing, and one standing in for the other three.
 * What a renter's browser notices: every method reaches billing with its Host, path and query as sent (`..` and `%2F`
 * included), the forwarding headers and the request ID; the gateway's own paths and the route table's prefixes are
 * the workload's there; a body over the JSON limit passes, one over the upload limit is the gateway's 413; a WebSocket
 * upgrade passes; a name under `ports.` that is no port host is the gateway's 404; any other Host is served as before.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, request } from 'node:http';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket, WebSocketServer } from 'ws';
import { SERVICES, type Service } from '../src/routes.ts';
import {
  type RunningGateway,
  startComposeNginx,
  startNodeGateway,
  startPlatformNginxGateway,
  type Upstreams,
} from './gateways.ts';

const SESSION = '3f2b0c1e-1111-4aaa-8bbb-0123456789ab';

/** What a recording service saw of one request (an upgrade's too). */
interface Seen {
  service: string;
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  /** The body's length, once read whole. */
  bytes: number;
  upgrade: boolean;
}

const seen: Seen[] = [];
const closers: (() => Promise<void>)[] = [];

/**
 * A recording service named `service` at `listen` (a TCP port on loopback, or a Unix socket's path): it answers every
 * request 200 with what it saw, and takes every WebSocket upgrade, echoing its messages.
 */
async function startRecorder(service: string, listen: { port: 0 } | { path: string }): Promise<string> {
  const wss = new WebSocketServer({ noServer: true, maxPayload: 4 * 1024 * 1024 });
  const server = createServer((req, res) => {
    let bytes = 0;
    req.on('data', (chunk: Buffer) => {
      bytes += chunk.length;
    });
    req.on('end', () => {
      const entry = { service, method: req.method ?? '', url: req.url ?? '', headers: req.headers, bytes };
      seen.push({ ...entry, upgrade: false });
      res.writeHead(200, { 'content-type': 'application/json', 'x-served-by': service });
      res.end(JSON.stringify({ service, url: req.url, bytes }));
    });
  });
  server.on('upgrade', (req, socket, head) => {
    seen.push({ service, method: req.method ?? '', url: req.url ?? '', headers: req.headers, bytes: 0, upgrade: true });
    wss.handleUpgrade(req, socket, head, (ws) => {
      ws.on('message', (data: Buffer, binary) => ws.send(data, { binary }));
      ws.send(`hello from ${service}`);
    });
  });
  await new Promise<void>((resolve) =>
    'path' in listen ? server.listen(listen.path, resolve) : server.listen(0, '127.0.0.1', resolve),
  );
  closers.push(async () => {
    for (const client of wss.clients) client.terminate();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  const address = server.address();
  return typeof address === 'string' ? address : `http://127.0.0.1:${address?.port}`;
}

let socketDir: string;
let atUrls: Required<Upstreams>;
beforeAll(async () => {
  // Billing, and the other three services (one recorder), at their gateway sockets and at URLs.
  socketDir = mkdtempSync(path.join(tmpdir(), 'port-hosts-'));
  const urls: Partial<Record<Service, string>> = {};
  const elsewhere = await startRecorder('elsewhere', { port: 0 });
  for (const service of SERVICES) {
    const name = service === 'billing' ? 'billing' : 'elsewhere';
    await startRecorder(name, { path: path.join(socketDir, `${service}.sock`) });
    urls[service] = service === 'billing' ? await startRecorder('billing', { port: 0 }) : elsewhere;
  }
  atUrls = urls as Required<Upstreams>;
});
afterAll(async () => {
  for (const close of closers) await close();
  rmSync(socketDir, { recursive: true, force: true });
});

const engines: { name: string; start: () => Promise<RunningGateway> }[] = [
  {
    name: "pnpm start's gateway (Node), on the services' gateway sockets",
    start: () => startNodeGateway({}, { socketDir }),
  },
  { name: "pnpm start's gateway (Node), at the services' URLs", start: () => startNodeGateway(atUrls) },
  {
    name: "pnpm start's nginx (deploy/gateway), on the services' gateway sockets",
    start: () => startPlatformNginxGateway({}, { socketDir }),
  },
  { name: "docker-compose's nginx (deploy/gateway)", start: () => startComposeNginx(atUrls) },
];

interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
}

/** A request to the gateway at `base` with the Host `host` and the path written as is (no URL parser in between). */
function send(
  base: string,
  opts: { host: string; path: string; method?: string; headers?: Record<string, string>; body?: Buffer | Readable },
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request({
      hostname: '127.0.0.1',
      port: Number(new URL(base).port),
      method: opts.method ?? 'GET',
      path: opts.path,
      headers: { ...opts.headers, host: opts.host },
    });
    req.on('response', (res) => {
      let body = '';
      res.on('data', (chunk: Buffer) => {
        body += chunk;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
    if (opts.body instanceof Readable) opts.body.pipe(req);
    else req.end(opts.body);
  });
}

/** What the services saw of the request with this request ID. */
const seenWith = (id: string) => seen.filter((s) => s.headers['x-request-id'] === id);

/** The head of the gateway's answer to a request that declares a body of `length` and sends none of it. */
function declaredOnly(base: string, host: string, length: number): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const socket = connect(Number(new URL(base).port), '127.0.0.1', () =>
      socket.write(
        `POST /upload HTTP/1.1\r\nHost: ${host}\r\nContent-Type: application/octet-stream\r\nContent-Length: ${length}\r\n\r\n`,
      ),
    );
    let text = '';
    socket.on('data', (d: Buffer) => {
      text += d;
      const [head = '', body = ''] = text.split('\r\n\r\n');
      const declared = /\r\ncontent-length: (\d+)/i.exec(head)?.[1];
      if (declared === undefined || Buffer.byteLength(body) < Number(declared)) return;
      socket.destroy();
      const [statusLine = '', ...lines] = head.split('\r\n');
      const headers = Object.fromEntries(
        lines.map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]),
      );
      resolve({ status: Number(statusLine.split(' ')[1]), headers, body });
    });
    socket.on('error', reject);
  });
}

describe.each(engines)('port hosts through $name', (engine) => {
  let gateway: RunningGateway;
  let base: string;
  /** The port host of session SESSION's port 8888, with the gateway's port, as a browser writes it. */
  let portHost: string;
  beforeAll(async () => {
    gateway = await engine.start();
    base = gateway.base;
    portHost = `${SESSION}-8888.ports.localhost:${new URL(base).port}`;
  });
  afterAll(async () => {
    await gateway?.stop();
  });

  it('passes every method to billing with its Host, its path and query as sent, and the forwarding headers', async () => {
    const rawPath = '/a%2Fb/../c?q=1&next=%2Flab';
    for (const method of ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']) {
      const id = `port-${method}-${randomBytes(4).toString('hex')}`;
      const body = ['POST', 'PUT', 'PATCH'].includes(method) ? Buffer.from('{"cell":1}') : undefined;
      const answer = await send(base, {
        method,
        host: portHost,
        path: rawPath,
        headers: {
          'x-request-id': id,
          'x-forwarded-for': '203.0.113.9',
          ...(body ? { 'content-type': 'application/json' } : {}),
        },
        ...(body ? { body } : {}),
      });
      expect(answer.status, method).toBe(200);
      expect(answer.headers['x-served-by'], method).toBe('billing');
      expect(answer.headers['x-request-id'], method).toBe(id);
      const [request] = seenWith(id);
      expect(request, method).toMatchObject({ service: 'billing', method, url: rawPath, bytes: body?.length ?? 0 });
      expect(request?.headers, method).toMatchObject({
        host: portHost,
        'x-forwarded-host': portHost,
        'x-forwarded-for': '127.0.0.1',
        'x-forwarded-proto': 'http',
      });
    }
    // The name is matched whatever its case; the Host goes on as written.
    const shouting = `${SESSION.toUpperCase()}-8888.PORTS.LOCALHOST:${new URL(base).port}`;
    const id = `port-case-${randomBytes(4).toString('hex')}`;
    expect((await send(base, { host: shouting, path: '/lab', headers: { 'x-request-id': id } })).status).toBe(200);
    expect(seenWith(id)[0]).toMatchObject({ service: 'billing', url: '/lab' });
    expect(seenWith(id)[0]?.headers.host?.toLowerCase()).toBe(shouting.toLowerCase());
  });

  it('keeps the Host, the IDs and the forwarding headers, whatever the caller names in Connection', async () => {
    const named = 'close, host, x-request-id, x-correlation-id, x-forwarded-for, x-forwarded-host, x-forwarded-proto';
    const id = `port-named-${randomBytes(4).toString('hex')}`;
    const answer = await send(base, {
      host: portHost,
      path: `/metrics?${id}`,
      headers: { connection: named, 'x-request-id': id, 'x-correlation-id': id },
    });
    // Billing saw the port host (the workload's /metrics), never its own.
    expect(answer.status).toBe(200);
    expect(seen.find((s) => s.url === `/metrics?${id}`)?.headers).toMatchObject({
      host: portHost,
      'x-request-id': id,
      'x-correlation-id': id,
      'x-forwarded-host': portHost,
      'x-forwarded-for': '127.0.0.1',
      'x-forwarded-proto': 'http',
    });
    // An upgrade's too.
    const ws = `port-named-ws-${randomBytes(4).toString('hex')}`;
    const head = await new Promise<string>((resolve, reject) => {
      const socket = connect(Number(new URL(base).port), '127.0.0.1', () =>
        socket.write(
          `GET /ws?${ws} HTTP/1.1\r\nHost: ${portHost}\r\nConnection: Upgrade, host, x-request-id\r\n` +
            `Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: ${randomBytes(16).toString('base64')}\r\n` +
            `X-Request-ID: ${ws}\r\n\r\n`,
        ),
      );
      let text = '';
      socket.on('data', (d: Buffer) => {
        text += d;
        if (text.includes('\r\n\r\n')) {
          socket.destroy();
          resolve(text);
        }
      });
      socket.on('error', reject);
    });
    expect(head).toMatch(/^HTTP\/1\.1 101 /);
    expect(seen.find((s) => s.url === `/ws?${ws}`)).toMatchObject({
      upgrade: true,
      headers: expect.objectContaining({ host: portHost, 'x-request-id': ws }),
    });
  });

  it("sends the gateway's own paths and every route's prefix on a port host to billing: they are the workload's", async () => {
    for (const rawPath of [
      '/health',
      '/metrics',
      '/health/billing',
      '/api/v1/auth/login',
      '/objects/x',
      '/.gateway/upgrade',
      '/',
    ]) {
      const id = `port-own-${randomBytes(4).toString('hex')}`;
      const answer = await send(base, { host: portHost, path: rawPath, headers: { 'x-request-id': id } });
      expect(answer.status, rawPath).toBe(200);
      expect(JSON.parse(answer.body), rawPath).toMatchObject({ service: 'billing', url: rawPath });
      expect(seenWith(id).map((s) => s.service)).toEqual(['billing']);
    }
  });

  it('passes a body over the JSON limit, declared or chunked, and refuses one over the upload limit itself', async () => {
    const size = 3 * 1024 * 1024;
    const declared = `port-body-${randomBytes(4).toString('hex')}`;
    const sent = await send(base, {
      method: 'POST',
      host: portHost,
      path: '/api/contents/notebook.ipynb',
      headers: { 'x-request-id': declared, 'content-type': 'application/json' },
      body: randomBytes(size),
    });
    expect(sent.status).toBe(200);
    expect(seenWith(declared)[0]).toMatchObject({ service: 'billing', bytes: size });
    const chunked = `port-chunked-${randomBytes(4).toString('hex')}`;
    const streamed = await send(base, {
      method: 'PUT',
      host: portHost,
      path: '/files/data.bin',
      headers: { 'x-request-id': chunked, 'content-type': 'application/octet-stream' },
      body: Readable.from(
        (function* () {
          for (let i = 0; i < 48; i++) yield randomBytes(64 * 1024);
        })(),
      ),
    });
    expect(streamed.status).toBe(200);
    expect(seenWith(chunked)[0]).toMatchObject({ service: 'billing', bytes: 48 * 64 * 1024 });
    // Over the upload limit (6 GiB): the gateway's 413 problem, before a byte reaches billing.
    const before = seen.length;
    const refused = await declaredOnly(base, portHost, 7 * 1024 ** 3);
    expect(refused.status).toBe(413);
    expect(JSON.parse(refused.body)).toMatchObject({ status: 413, code: 'PAYLOAD_TOO_LARGE' });
    expect(seen.length).toBe(before);
  });

  it('passes a WebSocket upgrade to billing, with its Host and path as sent', async () => {
    const id = `port-ws-${randomBytes(4).toString('hex')}`;
    const ws = new WebSocket(`${base.replace(/^http/, 'ws')}/api/kernels/k1/channels?session_id=s1`, {
      headers: { host: portHost, 'x-request-id': id },
    });
    const messages: string[] = [];
    const received = new Promise<void>((resolve) =>
      ws.on('message', (data: Buffer) => {
        messages.push(data.toString());
        if (messages.length === 2) resolve();
      }),
    );
    let upgraded: IncomingHttpHeaders = {};
    ws.on('upgrade', (res) => {
      upgraded = res.headers;
    });
    try {
      await new Promise((resolve, reject) => {
        ws.once('open', resolve);
        ws.once('error', reject);
      });
      expect(upgraded['x-request-id']).toBe(id);
      ws.send('print(1)');
      await received;
      expect(messages).toEqual(['hello from billing', 'print(1)']);
    } finally {
      ws.terminate();
    }
    expect(seenWith(id)).toEqual([
      expect.objectContaining({
        service: 'billing',
        upgrade: true,
        url: '/api/kernels/k1/channels?session_id=s1',
        headers: expect.objectContaining({ host: portHost, 'x-forwarded-host': portHost }),
      }),
    ]);
  });

  it("answers a name under ports. that is no port host with the gateway's 404 problem, whatever the path", async () => {
    const port = new URL(base).port;
    const before = seen.length;
    for (const host of [`foo.ports.localhost:${port}`, `${SESSION}-123456.ports.localhost`, `${SESSION}.ports.x`]) {
      for (const rawPath of ['/health', '/api/v1/billing/sessions', '/lab?x=1']) {
        const answer = await send(base, { host, path: rawPath });
        expect(answer.status, `${host}${rawPath}`).toBe(404);
        expect(answer.headers['content-type']).toContain('application/problem+json');
        expect(JSON.parse(answer.body), `${host}${rawPath}`).toMatchObject({
          status: 404,
          code: 'ROUTE_NOT_FOUND',
          instance: rawPath.split('?')[0],
        });
      }
    }
    expect(seen.length).toBe(before);
  });

  it('serves any other Host as before: its own health, the route table, its 404', async () => {
    for (const host of [`127.0.0.1:${new URL(base).port}`, 'ports.localhost', 'a.b.ports.localhost', 'localhost']) {
      const health = await send(base, { host, path: '/health' });
      expect(JSON.parse(health.body), host).toMatchObject({ status: 'UP', service: 'gateway' });
      const id = `api-${randomBytes(4).toString('hex')}`;
      const rates = await send(base, { host, path: '/api/v1/pricing/rates?x=1', headers: { 'x-request-id': id } });
      expect(rates.status).toBe(200);
      expect(seenWith(id)[0]).toMatchObject({ service: 'billing', url: '/api/v1/pricing/rates?x=1' });
      const auth = await send(base, { host, path: '/api/v1/auth/me' });
      expect(JSON.parse(auth.body)).toMatchObject({ service: 'elsewhere' });
      const nowhere = await send(base, { host, path: '/lab' });
      expect(nowhere.status).toBe(404);
      expect(JSON.parse(nowhere.body)).toMatchObject({ code: 'ROUTE_NOT_FOUND' });
      const dotted = await send(base, { host, path: '/api/v1/billing/%2e%2e/x' });
      expect(dotted.status).toBe(400);
    }
  });

  it("sends no hop-by-hop header on either way, and keeps the caller's Connection: close", async () => {
    for (const host of [portHost, 'localhost']) {
      const id = `hop-${randomBytes(4).toString('hex')}`;
      const answer = await send(base, {
        host,
        path: `/api/v1/pricing/hop?${id}`,
        headers: {
          'x-request-id': id,
          connection: 'close',
          'keep-alive': 'timeout=5',
          'proxy-connection': 'keep-alive',
          te: 'gzip',
        },
      });
      expect(answer.status, host).toBe(200);
      const got = seen.find((s) => s.url === `/api/v1/pricing/hop?${id}`)?.headers ?? {};
      for (const name of ['keep-alive', 'proxy-connection', 'te']) expect(got[name], `${host} ${name}`).toBeUndefined();
      // The service's own keep-alive (node:http's Keep-Alive: timeout=5) is its hop's: the caller asked for a close.
      expect(answer.headers['keep-alive'], host).toBeUndefined();
      expect(answer.headers.connection, host).toBe('close');
    }
  });

  it("counts a port host's requests as billing's, under one route", async () => {
    await send(base, { host: portHost, path: '/counted' });
    const series = 'gateway_requests_total{upstream="billing",method="GET",route="port-host",status_code="200"}';
    // nginx's lines reach its telemetry receiver a moment after the answer.
    await expect
      .poll(async () => (await send(base, { host: `127.0.0.1:${new URL(base).port}`, path: '/metrics' })).body, {
        timeout: 10_000,
      })
      .toContain(series);
  });
});
