/**
 * WebSocket upgrades through each gateway engine that runs here (pnpm start's Node gateway, in this process with short
 * timeouts; docker-compose's nginx and pnpm start's nginx on deploy/gateway's files) in front of a real WebSocket
 * service (`ws`) standing in for all four: frames both ways (text, binary, 1 MiB), the service speaking first, close
 * codes passed, many streams at once, the forwarding headers and IDs an ordinary request gets, the ordinary answer to
 * an upgrade the gateway does not forward (no route, a service-only path, a `..` segment), a raw byte stream
 * (`Upgrade: tcp`) passed to the API with its half-close where the engine keeps one and refused at a port host, any
 * other upgrade refused, the service's own refusal passed as it is, a service down, and each stream counted in the metrics. The Node
 * gateway also shows its timeouts: an idle stream outlives the ordinary request timeouts and is closed after its own
 * idle limit, and stopping the gateway closes open streams. (nginx's and Envoy's hour are configuration, checked in
 * test/routes.test.ts and tests/k8s.test.ts.)
 */
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import { type AddressInfo, connect, type Socket } from 'node:net';
import { openRawUpgrade } from '@gpu/common/raw-upgrade';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RawData, WebSocket, WebSocketServer } from 'ws';
import { buildGateway, type GatewayOptions } from '../src/gateway.ts';
import { SERVICES } from '../src/routes.ts';
import { type RunningGateway, startComposeNginx, startPlatformNginxGateway, type Upstreams } from './gateways.ts';

/** A WebSocket service on every path: it greets, echoes, reports its upgrade request, closes when asked. */
interface Backend {
  url: string;
  /** The upgrade requests it saw (path and headers). */
  seen: { url: string; headers: IncomingHttpHeaders }[];
  /** The close codes and reasons its streams ended with. */
  closes: { code: number; reason: string }[];
  close: () => Promise<void>;
}

async function startBackend(): Promise<Backend> {
  const seen: Backend['seen'] = [];
  const closes: Backend['closes'] = [];
  const wss = new WebSocketServer({ noServer: true, maxPayload: 4 * 1024 * 1024 });
  const server = createServer((req, res) => {
    // An ordinary request that takes longer than the Node gateway's shortened timeout below.
    if (req.url?.includes('/slow')) setTimeout(() => res.end('late'), 5000);
    else res.end('{"ok":true}');
  });
  server.on('upgrade', (req, socket, head) => {
    seen.push({ url: req.url ?? '', headers: req.headers });
    if (req.url?.includes('/refuse')) {
      const body = JSON.stringify({ status: 401, code: 'UNAUTHENTICATED', detail: 'a token is needed' });
      socket.end(
        `HTTP/1.1 401 Unauthorized\r\ncontent-type: application/problem+json\r\nwww-authenticate: Bearer\r\n` +
          `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
      );
      return;
    }
    if (String(req.headers.upgrade).toLowerCase() === 'tcp') {
      // A raw byte stream: what the caller sends comes back upper-cased, and its end is answered with a last line
      // (which reaches the caller only where its half-close passed).
      socket.write('HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n');
      if (head.length > 0) socket.write(head.toString().toUpperCase());
      socket.on('data', (d: Buffer) => socket.write(d.toString().toUpperCase()));
      socket.once('end', () => socket.end('\nyour end came\n'));
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => {
      ws.on('message', (data: Buffer, isBinary) => {
        const text = isBinary ? '' : data.toString();
        if (text.startsWith('close:')) ws.close(Number(text.slice(6)), 'the service says bye');
        else if (text === 'headers') ws.send(JSON.stringify({ url: req.url, headers: req.headers }));
        else ws.send(data, { binary: isBinary });
      });
      ws.on('close', (code, reason) => closes.push({ code, reason: reason.toString() }));
      ws.send('hello from the service');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    closes,
    close: async () => {
      for (const client of wss.clients) client.terminate();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** A WebSocket client whose messages are queued from its first moment (the service speaks first). */
interface Client {
  ws: WebSocket;
  /** The 101's headers. */
  headers: IncomingHttpHeaders;
  next: () => Promise<{ data: Buffer; binary: boolean }>;
  closed: Promise<{ code: number; reason: string }>;
}

function open(url: string, headers: Record<string, string> = {}): Promise<Client> {
  const ws = new WebSocket(url, { headers, maxPayload: 4 * 1024 * 1024 });
  const queue: { data: Buffer; binary: boolean }[] = [];
  const waiting: ((m: { data: Buffer; binary: boolean }) => void)[] = [];
  ws.on('message', (data: RawData, binary) => {
    const message = { data: data as Buffer, binary };
    const waiter = waiting.shift();
    if (waiter) waiter(message);
    else queue.push(message);
  });
  const closed = new Promise<{ code: number; reason: string }>((resolve) =>
    ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() })),
  );
  return new Promise((resolve, reject) => {
    let upgradeHeaders: IncomingHttpHeaders = {};
    ws.on('upgrade', (res) => {
      upgradeHeaders = res.headers;
    });
    ws.on('open', () =>
      resolve({
        ws,
        headers: upgradeHeaders,
        closed,
        next: () => {
          const queued = queue.shift();
          return queued ? Promise.resolve(queued) : new Promise((r) => waiting.push(r));
        },
      }),
    );
    ws.on('error', reject);
  });
}

/** An upgrade request written by hand, and the gateway's answer (read until its body is whole, or the end). */
function rawUpgrade(
  base: string,
  path: string,
  upgrade = 'websocket',
  host?: string,
): Promise<{ status: number; headers: Record<string, string>; body: string }> {
  const { port } = new URL(base);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), '127.0.0.1', () =>
      socket.write(
        `GET ${path} HTTP/1.1\r\nHost: ${host ?? `127.0.0.1:${port}`}\r\nConnection: Upgrade\r\nUpgrade: ${upgrade}\r\n` +
          `Sec-WebSocket-Key: ${randomBytes(16).toString('base64')}\r\nSec-WebSocket-Version: 13\r\n\r\n`,
      ),
    );
    let text = '';
    const done = () => {
      socket.destroy();
      const [head = '', body = ''] = text.split('\r\n\r\n');
      const [statusLine = '', ...lines] = head.split('\r\n');
      const headers = Object.fromEntries(
        lines.map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]),
      );
      resolve({ status: Number(statusLine.split(' ')[1]), headers, body });
    };
    socket.on('data', (d: Buffer) => {
      text += d;
      const [head, body = ''] = text.split('\r\n\r\n');
      const length = /\r\ncontent-length: (\d+)/i.exec(head ?? '')?.[1];
      if (length !== undefined && Buffer.byteLength(body) >= Number(length)) done();
    });
    socket.on('end', done);
    socket.on('error', reject);
  });
}

const everywhere = (url: string): Required<Upstreams> =>
  Object.fromEntries(SERVICES.map((s) => [s, url])) as Required<Upstreams>;

/** pnpm start's Node gateway in this process (so that its timeouts can be shortened), on a free port. */
async function startNodeGatewayHere(
  to: Upstreams,
  timeouts?: GatewayOptions['timeouts'],
): Promise<RunningGateway & { app: FastifyInstance }> {
  const upstreams = Object.fromEntries(SERVICES.map((s) => [s, to[s] ?? 'http://127.0.0.1:9'])) as Required<Upstreams>;
  const app = await buildGateway({ upstreams, logLevel: 'silent', ...(timeouts ? { timeouts } : {}) });
  const base = await app.listen({ host: '127.0.0.1', port: 0 });
  return { app, base, pids: () => [process.pid], stop: () => app.close() };
}

interface Engine {
  name: string;
  node: boolean;
  start: (to: Upstreams) => Promise<RunningGateway>;
}

const engines: Engine[] = [
  { name: "pnpm start's gateway (Node)", node: true, start: (to) => startNodeGatewayHere(to) },
  { name: "docker-compose's nginx (deploy/gateway)", node: false, start: (to) => startComposeNginx(to) },
  { name: "pnpm start's nginx (deploy/gateway)", node: false, start: (to) => startPlatformNginxGateway(to) },
];

let backend: Backend;
beforeAll(async () => {
  backend = await startBackend();
});
afterAll(async () => {
  await backend?.close();
});

describe.each(engines)('WebSocket upgrades through $name', (engine) => {
  let gateway: RunningGateway;
  let ws: string;
  beforeAll(async () => {
    gateway = await engine.start(everywhere(backend.url));
    ws = gateway.base.replace(/^http/, 'ws');
  });
  afterAll(async () => {
    await gateway?.stop();
  });

  it('passes frames both ways, binary and 1 MiB ones too, with the headers an ordinary request gets', async () => {
    const client = await open(`${ws}/api/v1/billing/stream?session=7`, {
      'x-request-id': 'ws-request-1',
      'x-correlation-id': 'ws-chain:1',
      'x-forwarded-for': '203.0.113.9',
      'x-real-ip': '203.0.113.9',
    });
    // The 101 names the request, as every answer of the gateway's does.
    expect(client.headers['x-request-id']).toBe('ws-request-1');
    expect(client.headers['x-correlation-id']).toBe('ws-chain:1');
    expect((await client.next()).data.toString()).toBe('hello from the service');
    client.ws.send('a line typed in a shell');
    expect(await client.next()).toEqual({ data: Buffer.from('a line typed in a shell'), binary: false });
    const bytes = Buffer.from([0, 1, 2, 0xfe, 0xff]);
    client.ws.send(bytes);
    expect(await client.next()).toEqual({ data: bytes, binary: true });
    const large = randomBytes(1024 * 1024);
    client.ws.send(large);
    const echoed = await client.next();
    expect(echoed.binary).toBe(true);
    expect(echoed.data.equals(large)).toBe(true);
    // What the service saw: the path and query as written, the gateway's forwarding headers and IDs, not the caller's
    // claims about its address.
    client.ws.send('headers');
    const { url, headers } = JSON.parse((await client.next()).data.toString()) as {
      url: string;
      headers: IncomingHttpHeaders;
    };
    expect(url).toBe('/api/v1/billing/stream?session=7');
    expect(headers).toMatchObject({
      upgrade: 'websocket',
      'x-forwarded-for': '127.0.0.1',
      'x-forwarded-proto': 'http',
      'x-request-id': 'ws-request-1',
      'x-correlation-id': 'ws-chain:1',
    });
    expect(headers['x-real-ip']).toBeUndefined();
    expect(String(headers.connection).toLowerCase()).toContain('upgrade');
    client.ws.close(1000);
    await client.closed;
  });

  it('passes a raw byte stream (Upgrade: tcp) to the API, and refuses one at a port host', async () => {
    const before = backend.seen.length;
    const stream = await openRawUpgrade(`${gateway.base}/api/v1/billing/sessions/x/port-forward?port=8000`, {
      headers: { 'x-correlation-id': 'raw-chain:1' },
    });
    let got = '';
    stream.on('data', (d: Buffer) => {
      got += String(d);
    });
    const ended = new Promise<void>((resolve) => stream.once('end', () => resolve()));
    const large = 'x'.repeat(1024 * 1024);
    stream.write(`bytes as they are, ${large}`);
    await expect.poll(() => got.length, { timeout: 30_000 }).toBe(19 + large.length);
    expect(got).toBe(`BYTES AS THEY ARE, ${large.toUpperCase()}`);
    // The caller's end closes the stream; the Node gateway passes it as a half-close (the service's answer to it
    // still comes back), nginx ends the connection at either side's end.
    stream.end();
    await ended;
    if (engine.node) expect(got.endsWith('\nyour end came\n')).toBe(true);
    stream.destroy();
    expect(backend.seen[before]).toMatchObject({
      url: '/api/v1/billing/sessions/x/port-forward?port=8000',
      headers: { upgrade: 'tcp', 'x-correlation-id': 'raw-chain:1' },
    });
    // A browser's origin takes WebSockets only.
    const portHost = await rawUpgrade(
      gateway.base,
      '/',
      'tcp',
      '3f2b0c1e-1111-4aaa-8bbb-0123456789ab-8888.ports.localhost',
    );
    expect(portHost.status).toBe(400);
    expect(JSON.parse(portHost.body)).toMatchObject({ code: 'BAD_REQUEST' });
    expect(backend.seen).toHaveLength(before + 1);
  });

  it('passes close codes and reasons both ways', async () => {
    const caller = await open(`${ws}/objects/some/stream`);
    await caller.next();
    const before = backend.closes.length;
    caller.ws.close(4000, 'the renter is done');
    expect(await caller.closed).toEqual({ code: 4000, reason: 'the renter is done' });
    await expect
      .poll(() => backend.closes.slice(before), { timeout: 20_000 })
      .toContainEqual({ code: 4000, reason: 'the renter is done' });

    const served = await open(`${ws}/providers/abc/exec`);
    await served.next();
    served.ws.send('close:4001');
    expect(await served.closed).toEqual({ code: 4001, reason: 'the service says bye' });
  });

  it('carries many streams at once, each its own', async () => {
    // A path of each service's.
    const prefixes = ['/api/v1/auth', '/uploads', '/offers', '/api/v1/provider'];
    const clients = await Promise.all(
      Array.from({ length: 48 }, (_, i) => open(`${ws}${prefixes[i % prefixes.length]}/stream/${i}`)),
    );
    await Promise.all(clients.map((c) => c.next()));
    for (const [i, c] of clients.entries()) c.ws.send(`stream ${i}`);
    const answers = await Promise.all(clients.map((c) => c.next()));
    expect(answers.map((a) => a.data.toString())).toEqual(clients.map((_, i) => `stream ${i}`));
    for (const c of clients) c.ws.close(1000);
    await Promise.all(clients.map((c) => c.closed));
  });

  it('answers an upgrade it does not forward as it answers an ordinary request there, and passes the refusal of a service', async () => {
    const seenBefore = backend.seen.length;
    for (const path of ['/nowhere/at/all', '/grants/x', '/objectsx']) {
      const res = await rawUpgrade(gateway.base, path);
      expect(res.status, path).toBe(404);
      expect(res.headers['content-type'], path).toContain('application/problem+json');
      expect(JSON.parse(res.body), path).toMatchObject({ status: 404, code: 'ROUTE_NOT_FOUND' });
      expect(res.headers['x-request-id'], path).toBeTruthy();
    }
    // A `..` segment anywhere, plain or percent-encoded: no way around the table, or to the gateway's own paths.
    for (const path of ['/objects/../metrics', '/api/v1/billing/%2e%2e/x', '/nowhere/../health', '/x/..%2fobjects']) {
      const res = await rawUpgrade(gateway.base, path);
      expect(res.status, path).toBe(400);
      expect(JSON.parse(res.body), path).toMatchObject({ status: 400, code: 'BAD_REQUEST' });
    }
    // Only WebSocket: another upgrade is refused on a routed path too.
    const h2c = await rawUpgrade(gateway.base, '/api/v1/billing/stream', 'h2c');
    expect(h2c.status).toBe(400);
    expect(h2c.headers['content-type']).toContain('application/problem+json');
    expect(JSON.parse(h2c.body)).toMatchObject({
      status: 400,
      code: 'BAD_REQUEST',
      detail: 'only WebSocket upgrades, and raw byte streams (tcp) to the API, pass the gateway',
    });
    // None of these reached the service.
    expect(backend.seen.slice(seenBefore)).toEqual([]);
    // The service decides: its refusal passes as it is.
    const refused = await rawUpgrade(gateway.base, '/api/v1/auth/refuse');
    expect(refused.status).toBe(401);
    expect(refused.headers['www-authenticate']).toBe('Bearer');
    expect(JSON.parse(refused.body)).toMatchObject({ code: 'UNAUTHENTICATED' });
  });

  it('answers an upgrade to a service it cannot reach with a 502 problem', async () => {
    const lonely = await engine.start({ ...everywhere(backend.url), billing: 'http://127.0.0.1:9' });
    try {
      const res = await rawUpgrade(lonely.base, '/api/v1/billing/stream');
      expect(res.status).toBe(502);
      expect(res.headers['content-type']).toContain('application/problem+json');
      const problem = JSON.parse(res.body) as Record<string, unknown>;
      expect(problem).toMatchObject({ code: 'BAD_GATEWAY', detail: 'billing did not answer' });
      expect(JSON.stringify(problem)).not.toContain('127.0.0.1');
      // The others still pass.
      const client = await open(`${lonely.base.replace(/^http/, 'ws')}/offers/stream`);
      expect((await client.next()).data.toString()).toBe('hello from the service');
      client.ws.close(1000);
      await client.closed;
    } finally {
      await lonely.stop();
    }
  });

  it('counts each stream as a request of its route, status 101', async () => {
    const client = await open(`${ws}/api/v1/deposits/watch`);
    await client.next();
    client.ws.close(1000);
    await client.closed;
    const counted = 'upstream="billing",method="GET",route="/api/v1/deposits/\\*",status_code="101"';
    // nginx's line reaches its telemetry receiver a moment after the stream ends.
    await expect
      .poll(
        async () => {
          const text = await (await fetch(`${gateway.base}/metrics`)).text();
          return Number(new RegExp(`^gateway_requests_total\\{${counted}\\} (\\d+)$`, 'm').exec(text)?.[1] ?? 0);
        },
        { timeout: 30_000 },
      )
      .toBeGreaterThanOrEqual(1);
  });
});

describe("pnpm start's Node gateway: an upgraded stream's timeouts", () => {
  it('keeps an idle stream past the ordinary request timeouts, and closes it after its own idle limit', async () => {
    // Ordinary requests: two seconds for a service's answer (its upgrade's too, which a busy machine may take a
    // while to give), and for an idle connection between two requests.
    const gateway = await startNodeGatewayHere(everywhere(backend.url), {
      upstream: 2000,
      keepAlive: 2000,
      upgradeIdle: 8000,
    });
    try {
      const slow = await fetch(`${gateway.base}/api/v1/billing/slow`);
      expect(slow.status).toBe(504);
      expect(await slow.json()).toMatchObject({ code: 'UPSTREAM_TIMEOUT' });

      const client = await open(`${gateway.base.replace(/^http/, 'ws')}/api/v1/billing/shell`);
      await client.next();
      // Idle over twice as long as an ordinary request may wait: still open.
      await new Promise((resolve) => setTimeout(resolve, 5000));
      // The stream's last traffic passes the gateway after this send: its idle limit counts from then at the earliest.
      const started = Date.now();
      client.ws.send('still here');
      expect((await client.next()).data.toString()).toBe('still here');
      // Idle past its own limit: the gateway closes it (no close frame: it parses none).
      const closed = await client.closed;
      expect(closed.code).toBe(1006);
      expect(Date.now() - started).toBeGreaterThanOrEqual(7900);
    } finally {
      await gateway.stop();
    }
  });

  it("lets go of the service's connection when the caller leaves before the answer, and streams a refusal of any size", async () => {
    // A service that never answers an upgrade on /silent, and answers one on /page with a page that does not end.
    const connections: Socket[] = [];
    const service = createServer();
    service.on('upgrade', (req, socket: Socket) => {
      connections.push(socket);
      // Read, so that the gateway's end is seen.
      socket.resume();
      if (req.url?.startsWith('/api/v1/billing/page')) {
        socket.write('HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n');
        const chunk = 'x'.repeat(64 * 1024);
        socket.write(`${chunk.length.toString(16)}\r\n${chunk}\r\n`);
      }
    });
    await new Promise<void>((resolve) => service.listen(0, '127.0.0.1', resolve));
    const gateway = await startNodeGatewayHere(
      everywhere(`http://127.0.0.1:${(service.address() as AddressInfo).port}`),
    );
    const upgrade = (path: string) =>
      `GET ${path} HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n` +
      `Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: ${randomBytes(16).toString('base64')}\r\n\r\n`;
    const port = Number(new URL(gateway.base).port);
    try {
      // The caller ends its side (a FIN, no close) while the service is silent: the service's connection goes.
      const caller = connect(port, '127.0.0.1', () => caller.write(upgrade('/api/v1/billing/silent')));
      await expect.poll(() => connections.length, { timeout: 30_000 }).toBe(1);
      caller.end();
      await expect
        .poll(() => connections[0]?.destroyed || connections[0]?.readableEnded, { timeout: 30_000 })
        .toBe(true);
      caller.destroy();

      // A refusal whose body never ends reaches the caller as it comes (the gateway holds none of it).
      const reader = connect(port, '127.0.0.1', () => reader.write(upgrade('/api/v1/billing/page')));
      let got = '';
      reader.on('data', (d: Buffer) => {
        got += d;
      });
      await expect.poll(() => got.length, { timeout: 30_000 }).toBeGreaterThan(64 * 1024);
      expect(got).toMatch(/^HTTP\/1\.1 200 /);
      reader.destroy();
      // Its caller gone, the gateway lets go of the service too.
      await expect
        .poll(() => connections[1]?.destroyed || connections[1]?.readableEnded, { timeout: 30_000 })
        .toBe(true);
    } finally {
      for (const c of connections) c.destroy();
      await gateway.stop();
      await new Promise<void>((resolve) => service.close(() => resolve()));
    }
  });

  it("passes a raw stream's bytes and half-close sent before a late 101, 200 KiB of them too", async () => {
    // A service that answers the upgrade 300 ms late, then upper-cases what it gets and answers its end.
    const service = createServer();
    let received = 0;
    service.on('upgrade', (_req, socket: Socket) => {
      setTimeout(() => {
        socket.write('HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n');
        socket.on('data', (d: Buffer) => {
          received += d.length;
          if (d.length < 100) socket.write(d.toString().toUpperCase());
        });
        socket.once('end', () => socket.end('\nyour end came\n'));
      }, 300);
    });
    await new Promise<void>((resolve) => service.listen(0, '127.0.0.1', resolve));
    const gateway = await startNodeGatewayHere(
      everywhere(`http://127.0.0.1:${(service.address() as AddressInfo).port}`),
    );
    const port = Number(new URL(gateway.base).port);
    const raw = (body: Buffer) =>
      new Promise<string>((resolve, reject) => {
        const caller = connect(port, '127.0.0.1', () => {
          caller.write(
            'GET /api/v1/billing/tcp HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n',
          );
          caller.end(body);
        });
        let text = '';
        caller.on('data', (d: Buffer) => {
          text += d;
        });
        caller.on('close', () => resolve(text));
        caller.on('error', reject);
      });
    try {
      const answer = await raw(Buffer.from('hello'));
      expect(answer).toMatch(/^HTTP\/1\.1 101 /);
      expect(answer).toContain('HELLO');
      expect(answer).toContain('your end came');
      received = 0;
      const big = await raw(Buffer.alloc(200 * 1024, 0x61));
      expect(big).toContain('your end came');
      expect(received).toBe(200 * 1024);
    } finally {
      await gateway.stop();
      await new Promise<void>((resolve) => service.close(() => resolve()));
    }
  });

  it('closes open streams when it stops, rather than wait for them', async () => {
    const gateway = await startNodeGatewayHere(everywhere(backend.url));
    const client = await open(`${gateway.base.replace(/^http/, 'ws')}/api/v1/provider/daemon`);
    await client.next();
    const started = Date.now();
    await gateway.stop();
    expect(Date.now() - started).toBeLessThan(5000);
    expect((await client.closed).code).toBe(1006);
  });
});
