import { connect } from 'node:net';
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type App, baseConfigSchema, createApp, createLogger } from '../src/index.ts';
import { type Caller, captureLogs, startTestIssuer, type TestIssuer } from '../src/testing/index.ts';

const logs = captureLogs();
let app: App;
let port: number;
let issuer: TestIssuer;
let caller: Caller;
/** What the held routes wait for: they answer once the test resolves it. */
let held = Promise.withResolvers<void>();

interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** Writes `request` as-is on a fresh connection and reads the response until the server closes it. */
function rawRequest(request: string): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('error', (err) => (chunks.length > 0 ? undefined : reject(err)));
    socket.on('close', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      const [head = '', ...rest] = text.split('\r\n\r\n');
      const [statusLine = '', ...headerLines] = head.split('\r\n');
      const headers: Record<string, string> = {};
      for (const line of headerLines) {
        const i = line.indexOf(':');
        headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
      }
      resolve({ status: Number(statusLine.split(' ')[1]), headers, body: rest.join('\r\n\r\n') });
    });
    socket.write(request);
  });
}

beforeAll(async () => {
  issuer = await startTestIssuer();
  caller = await issuer.user(['renter']);
  const config = baseConfigSchema.parse({ access: issuer.accessConfig });
  const logger = createLogger({ service: 'test', instanceId: 'i-1', level: 'info', destination: logs.destination });
  app = await createApp({ service: 'test-service', description: 'test', config, logger });
  app.get('/x/:name', async (request) => request.params);
  app.post('/x/:name', async (request) => ({ ...(request.params as object), body: request.body }));
  // Answered when the test says: one answers at once, the other starts its body and ends it then.
  app.get('/held', async () => {
    await held.promise;
    return { answered: 'held' };
  });
  app.get('/streamed', (_request, reply) => {
    const body = new PassThrough();
    body.write('first part;');
    void held.promise.then(() => body.end('last part'));
    return reply.type('text/plain').send(body);
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const address = app.server.address();
  port = typeof address === 'object' && address ? address.port : 0;
});

afterAll(async () => {
  await app.close();
  await issuer.close();
});

describe('errors before a route runs', () => {
  it('answers a URL that does not decode with a problem body and the request IDs', async () => {
    const res = await rawRequest(
      'GET /x/%E0%A4%A HTTP/1.1\r\nHost: localhost\r\nX-Correlation-ID: corr-bad-url\r\nConnection: close\r\n\r\n',
    );
    expect(res.status).toBe(400);
    expect(res.headers['content-type']).toContain('application/problem+json');
    expect(res.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
    expect(res.headers['x-correlation-id']).toBe('corr-bad-url');
    const body = JSON.parse(res.body);
    expect(body).toMatchObject({ type: 'about:blank', title: 'Bad Request', status: 400, code: 'BAD_URL' });
    expect(body.request_id).toBe(res.headers['x-request-id']);
    const line = logs.lines().find((l) => l.request_id === body.request_id && l.code === 'BAD_URL');
    expect(line).toMatchObject({ correlation_id: 'corr-bad-url' });
  });

  it('answers headers that are too large with a 431 problem body and closes the connection', async () => {
    const res = await rawRequest(`GET /health HTTP/1.1\r\nHost: localhost\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`);
    expect(res.status).toBe(431);
    expect(res.headers['content-type']).toContain('application/problem+json');
    expect(res.headers.connection).toBe('close');
    const body = JSON.parse(res.body);
    expect(body).toMatchObject({ status: 431, title: 'Request Header Fields Too Large', code: 'HEADERS_TOO_LARGE' });
    expect(body.request_id).toBe(res.headers['x-request-id']);
  });

  it('answers a malformed header line with a 400 problem body', async () => {
    const res = await rawRequest('GET /health HTTP/1.1\r\nHost: localhost\r\nthis is not a header\r\n\r\n');
    expect(res.status).toBe(400);
    expect(res.headers['content-type']).toContain('application/problem+json');
    expect(res.headers.connection).toBe('close');
    expect(JSON.parse(res.body)).toMatchObject({ status: 400, code: 'MALFORMED_REQUEST' });
  });

  it('answers a malformed request pipelined behind another only after that one is answered whole', async () => {
    for (const path of ['/held', '/streamed']) {
      held = Promise.withResolvers<void>();
      const errorsBefore = logs.lines().filter((l) => l.code === 'MALFORMED_REQUEST').length;
      const socket = connect(port, '127.0.0.1');
      const chunks: Buffer[] = [];
      socket.on('data', (c: Buffer) => chunks.push(c));
      const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
      socket.write(
        `GET ${path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: ${caller.headers.authorization}\r\n\r\n` +
          'GET /health HTTP/1.1\r\nHost: localhost\r\nthis is not a header\r\n\r\n',
      );
      // The second request is refused (logged) while the first is still being answered.
      await expect
        .poll(() => logs.lines().filter((l) => l.code === 'MALFORMED_REQUEST').length, { timeout: 30_000 })
        .toBe(errorsBefore + 1);
      held.resolve();
      await closed;
      const text = Buffer.concat(chunks).toString('utf8');
      // The first answer is whole and first; the problem follows it, and the connection closes.
      expect(text.startsWith('HTTP/1.1 200 OK\r\n'), `${path}: ${text}`).toBe(true);
      // (The streamed one chunked: its last part and the closing chunk.)
      expect(text, path).toContain(
        path === '/held' ? '{"answered":"held"}HTTP/1.1 400' : 'first part;\r\n9\r\nlast part\r\n0\r\n\r\nHTTP/1.1 400',
      );
      const second = text.indexOf('HTTP/1.1 400 Bad Request\r\n');
      expect(second, `${path}: ${text}`).toBeGreaterThan(0);
      expect(JSON.parse(text.slice(text.indexOf('\r\n\r\n', second) + 4))).toMatchObject({
        code: 'MALFORMED_REQUEST',
      });
    }
  });

  it('answers a body that does not parse at once, and a malformed request behind many as it comes', async () => {
    // A chunk size that is no number: the route waits for a body that never comes, the connection gets its 400 now
    // (not the request timeout's 503, 30 s on).
    const badBody = await rawRequest(
      `POST /x/ok HTTP/1.1\r\nHost: localhost\r\nAuthorization: ${caller.headers.authorization}\r\n` +
        'Content-Type: application/json\r\n' +
        'Transfer-Encoding: chunked\r\n\r\nZZ\r\n{}\r\n',
    );
    expect(badBody.status).toBe(400);
    expect(JSON.parse(badBody.body)).toMatchObject({ code: 'MALFORMED_REQUEST' });
    // Behind 24 answers: each passes the problem on to the next once (before, every answer doubled the listeners
    // waiting on the next: 2^24 for the last).
    const ok = `GET /x/ok HTTP/1.1\r\nHost: localhost\r\nAuthorization: ${caller.headers.authorization}\r\n\r\n`;
    const text = await new Promise<string>((resolve) => {
      const socket = connect(port, '127.0.0.1');
      const chunks: Buffer[] = [];
      socket.on('data', (c: Buffer) => chunks.push(c));
      socket.on('close', () => resolve(Buffer.concat(chunks).toString('utf8')));
      socket.write(`${ok.repeat(24)}GET /health HTTP/1.1\r\nHost: localhost\r\nthis is not a header\r\n\r\n`);
    });
    expect(text.match(/HTTP\/1\.1 200 OK/g)).toHaveLength(24);
    expect(text.match(/HTTP\/1\.1 400 Bad Request/g)).toHaveLength(1);
    expect(text.indexOf('HTTP/1.1 400')).toBeGreaterThan(text.lastIndexOf('HTTP/1.1 200'));
  });

  it('keeps serving afterwards', async () => {
    const res = await fetch(`http://127.0.0.1:${port}/x/ok`, { headers: caller.headers });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ name: 'ok' });
  });
});
