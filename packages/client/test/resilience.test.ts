/** The glue around every call, against real HTTP servers: tokens, correlation IDs, time limits and retries. */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { registryClient, resilientFetch, staticToken, type TokenSource } from '../src/index.ts';

interface Seen {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
}

const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
});

/** A server answering each request with the next of `answers` (status, headers, body, delay), recording requests. */
async function scripted(
  answers: { status: number; headers?: Record<string, string>; body?: unknown; delayMs?: number }[],
): Promise<{ url: string; seen: Seen[] }> {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers });
    const a = answers[Math.min(seen.length - 1, answers.length - 1)]!;
    req.resume();
    const answer = setTimeout(() => {
      if (res.destroyed) return;
      res.writeHead(a.status, { 'content-type': 'application/json', ...a.headers });
      res.end(JSON.stringify(a.body ?? {}));
    }, a.delayMs ?? 0);
    res.on('close', () => clearTimeout(answer));
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

const fast = { timeoutMs: 2000, retries: 2 };
const providerID = '3f0e9a8e-1d4b-4f56-8f5e-2a9b6c1d0e7f';

describe('service clients', () => {
  it('sends the token and the correlation ID on every request', async () => {
    const s = await scripted([{ status: 200, body: [] }]);
    const client = registryClient({
      baseUrl: s.url,
      token: staticToken('tok'),
      correlationId: () => 'corr-1',
      ...fast,
    });
    const { data, response } = await client.GET('/providers');
    expect(response.status).toBe(200);
    expect(data).toEqual([]);
    expect(s.seen[0]!.headers.authorization).toBe('Bearer tok');
    expect(s.seen[0]!.headers['x-correlation-id']).toBe('corr-1');
  });

  it('retries an idempotent request on 503 and answers the success', async () => {
    const s = await scripted([
      { status: 503, body: { code: 'DEPENDENCY_UNAVAILABLE' } },
      { status: 200, body: [] },
    ]);
    const client = registryClient({ baseUrl: s.url, token: staticToken('t'), ...fast });
    const { response } = await client.GET('/providers');
    expect(response.status).toBe(200);
    expect(s.seen).toHaveLength(2);
  });

  it('gives up after the bounded retries, answering the last problem', async () => {
    const s = await scripted([{ status: 503, body: { code: 'DEPENDENCY_UNAVAILABLE' } }]);
    const client = registryClient({ baseUrl: s.url, token: staticToken('t'), ...fast });
    const { error, response } = await client.GET('/providers');
    expect(response.status).toBe(503);
    expect(error).toMatchObject({ code: 'DEPENDENCY_UNAVAILABLE' });
    expect(s.seen).toHaveLength(3);
  });

  it('does not retry a POST without an Idempotency-Key, and does retry one with it', async () => {
    const body = { owner_id: 'o', name: 'n', gpus: [] } as never;
    const plain = await scripted([{ status: 503 }, { status: 201, body: {} }]);
    const once = await registryClient({ baseUrl: plain.url, token: staticToken('t'), ...fast }).POST('/providers', {
      body,
    });
    expect(once.response.status).toBe(503);
    expect(plain.seen).toHaveLength(1);
    const keyed = await scripted([{ status: 503 }, { status: 201, body: {} }]);
    const twice = await registryClient({ baseUrl: keyed.url, token: staticToken('t'), ...fast }).POST('/providers', {
      body,
      headers: { 'idempotency-key': 'k-1' },
    });
    expect(twice.response.status).toBe(201);
    expect(keyed.seen).toHaveLength(2);
  });

  it('limits each attempt in time, then retries', async () => {
    // The first answer comes far later than any busy machine could stretch the 2 s limit and the retry: an answer
    // within 15 s is one the limit cut short. (The limit is long enough for the retry's own answer on a busy machine.)
    const s = await scripted([
      { status: 200, delayMs: 60_000, body: {} },
      { status: 200, body: { id: providerID } },
    ]);
    const client = registryClient({ baseUrl: s.url, token: staticToken('t'), timeoutMs: 2000, retries: 1 });
    const started = Date.now();
    const { data } = await client.GET('/providers/{providerID}', { params: { path: { providerID } } });
    expect(data).toMatchObject({ id: providerID });
    expect(s.seen).toHaveLength(2);
    expect(Date.now() - started).toBeLessThan(15_000);
  });

  it("limits an API answer's body in time too: headers then silence is a failure, not a wait without end", async () => {
    const server = createServer((req, res) => {
      req.resume();
      res.writeHead(200, { 'content-type': 'application/json' });
      // The start of a body, and nothing more (the server keeps the connection open).
      res.write('[');
    });
    servers.push(server);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const client = registryClient({ baseUrl: url, token: staticToken('t'), timeoutMs: 300, retries: 0 });
    const started = Date.now();
    await expect(client.GET('/providers/{providerID}', { params: { path: { providerID } } })).rejects.toThrow(
      /no response within 300 ms/,
    );
    expect(Date.now() - started).toBeLessThan(10_000);
    server.closeAllConnections();
  });

  it('leaves a streamed answer (a download of an object stored as JSON) its time, past the limit of its headers', async () => {
    const server = createServer((req, res) => {
      req.resume();
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('[');
      setTimeout(() => res.end('1]'), 800);
    });
    servers.push(server);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
    const policy = { timeoutMs: 300, retries: 0, fetch: globalThis.fetch };
    const streamed = await resilientFetch({ ...policy, timeBody: false })(new Request(url));
    expect(await streamed.text()).toBe('[1]');
    const timed = await resilientFetch(policy)(new Request(url));
    await expect(timed.text()).rejects.toThrow();
  });

  it('renews a refused token once and repeats the request with the new one', async () => {
    const s = await scripted([
      { status: 401, body: { code: 'INVALID_TOKEN' } },
      { status: 200, body: [] },
    ]);
    let issued = 0;
    const token: TokenSource = { get: async () => `token-${issued}`, invalidate: () => void issued++ };
    const { response } = await registryClient({ baseUrl: s.url, token, ...fast }).GET('/providers');
    expect(response.status).toBe(200);
    expect(s.seen.map((r) => r.headers.authorization)).toEqual(['Bearer token-0', 'Bearer token-1']);
  });

  it('answers a second 401 as it came (no loop)', async () => {
    const s = await scripted([{ status: 401, body: { code: 'INVALID_TOKEN' } }]);
    const token: TokenSource = { get: async () => 'bad', invalidate: () => {} };
    const { response } = await registryClient({ baseUrl: s.url, token, ...fast }).GET('/providers');
    expect(response.status).toBe(401);
    expect(s.seen).toHaveLength(2);
  });
});

describe('a request whose body is read once (replay: false)', () => {
  it('is sent once as it is: never copied for a retry, so a 503 comes back as answered', async () => {
    const { url, seen } = await scripted([{ status: 503 }, { status: 200 }]);
    const sent: Request[] = [];
    const send = resilientFetch({
      timeoutMs: 2000,
      retries: 2,
      replay: false,
      baseBackoffMs: 1,
      fetch: (async (request: Request) => {
        sent.push(request);
        return fetch(request);
      }) as typeof fetch,
    });
    const body = new Blob(['streamed']).stream();
    const request = new Request(`${url}/objects/b/k`, { method: 'PUT', body, duplex: 'half' } as RequestInit);
    const res = await send(request);
    expect(res.status).toBe(503);
    expect(seen).toHaveLength(1);
    // The body stream itself went out (a copy would tee it and hold what it read for a second try).
    expect(sent).toHaveLength(1);
    expect(request.bodyUsed).toBe(true);
  });
});
