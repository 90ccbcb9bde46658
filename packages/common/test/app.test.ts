import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { type App, baseConfigSchema, createApp, createLogger, errors } from '../src/index.ts';
import { type Caller, captureLogs, startTestIssuer, type TestIssuer } from '../src/testing/index.ts';

const logs = captureLogs();
let app: App;
let issuer: TestIssuer;
let caller: Caller;

type InjectOptions = import('fastify').InjectOptions;

/** app.inject with a valid access token (every route of these tests needs one). */
const inject = (opts: InjectOptions) =>
  app.inject({ ...opts, headers: { ...caller.headers, ...(opts.headers as Record<string, string>) } });

beforeAll(async () => {
  issuer = await startTestIssuer();
  caller = await issuer.user(['renter']);
  const config = baseConfigSchema.parse({
    access: issuer.accessConfig,
    // Generous: every other route here (a static file of the docs read from disk on a busy machine) answers well
    // within it; /slow is slower still.
    request_timeout: '2s',
    server: { trusted_proxies: ['127.0.0.1'], cors_origins: ['https://app.example'] },
  });
  const logger = createLogger({ service: 'test', instanceId: 'i-1', level: 'info', destination: logs.destination });
  app = await createApp({
    service: 'test-service',
    description: 'test',
    config,
    logger,
    healthChecks: { db: async () => {} },
  });
  app.post(
    '/echo',
    { schema: { body: z.object({ name: z.string().min(1), count: z.number().int().min(0) }) } },
    async (request) => ({ name: request.body.name, ip: request.clientIp, correlation_id: request.correlationId }),
  );
  app.get('/boom', async () => {
    throw new Error('secret sql text: select * from users');
  });
  app.get('/missing', async () => {
    throw errors.notFound('THING_NOT_FOUND', 'thing 42 not found');
  });
  app.get('/slow', async () => {
    await new Promise((r) => setTimeout(r, 2600));
    return { late: true };
  });
  app.get('/slow-allowed', { config: { timeoutMs: 0 } }, async () => {
    await new Promise((r) => setTimeout(r, 2300));
    return { late: true };
  });
  app.get('/unauth', async () => {
    throw errors.unauthorized();
  });
  await app.ready();
});

afterAll(async () => {
  await app.close();
  await issuer.close();
});

describe('app factory', () => {
  it('validates bodies and answers a problem body with field errors', async () => {
    const res = await inject({ method: 'POST', url: '/echo', payload: { name: '', count: -1 } });
    expect(res.statusCode).toBe(400);
    expect(res.headers['content-type']).toContain('application/problem+json');
    const body = res.json();
    expect(body).toMatchObject({ status: 400, code: 'VALIDATION_ERROR', title: 'Bad Request' });
    expect(body.errors.map((e: { path: string }) => e.path).sort()).toEqual(['body.count', 'body.name']);
    expect(body.request_id).toBe(res.headers['x-request-id']);
  });

  it('answers malformed JSON with 400 MALFORMED_JSON', async () => {
    const res = await inject({
      method: 'POST',
      url: '/echo',
      payload: '{"name": ',
      headers: { 'content-type': 'application/json' },
    });
    expect(res.statusCode).toBe(400);
    expect(res.json().code).toBe('MALFORMED_JSON');
  });

  it('turns a thrown error into a 500 problem without internals, and keeps serving', async () => {
    const res = await inject({ method: 'GET', url: '/boom' });
    expect(res.statusCode).toBe(500);
    expect(res.json()).toMatchObject({ code: 'INTERNAL_ERROR', status: 500 });
    expect(res.body).not.toContain('secret sql');
    expect(res.body).not.toContain('at ');
    const again = await inject({ method: 'GET', url: '/health' });
    expect(again.statusCode).toBe(200);
  });

  it('maps typed errors to their status and code', async () => {
    const res = await inject({ method: 'GET', url: '/missing' });
    expect(res.statusCode).toBe(404);
    expect(res.json()).toMatchObject({ code: 'THING_NOT_FOUND', detail: 'thing 42 not found' });
    const unauth = await inject({ method: 'GET', url: '/unauth' });
    expect(unauth.statusCode).toBe(401);
    expect(unauth.headers['www-authenticate']).toBe('Bearer');
  });

  it('answers unknown routes with a 404 problem', async () => {
    const res = await inject({ method: 'GET', url: '/nope?x=1' });
    expect(res.statusCode).toBe(404);
    expect(res.json()).toMatchObject({ code: 'ROUTE_NOT_FOUND' });
  });

  it('accepts sane request and correlation IDs, echoes them and logs them', async () => {
    const res = await inject({
      method: 'POST',
      url: '/echo',
      payload: { name: 'a', count: 1 },
      headers: { 'x-request-id': 'req-123', 'x-correlation-id': 'corr-456' },
    });
    expect(res.headers['x-request-id']).toBe('req-123');
    expect(res.headers['x-correlation-id']).toBe('corr-456');
    expect(res.json().correlation_id).toBe('corr-456');
    const lines = logs.lines().filter((l) => l.request_id === 'req-123');
    expect(lines.length).toBeGreaterThanOrEqual(2);
    expect(lines.every((l) => l.correlation_id === 'corr-456')).toBe(true);
  });

  it('replaces insane IDs with generated UUIDs', async () => {
    const res = await inject({
      method: 'GET',
      url: '/health',
      headers: { 'x-request-id': 'bad id with spaces', 'x-correlation-id': 'x'.repeat(500) },
    });
    expect(res.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
    expect(res.headers['x-correlation-id']).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('takes the client IP from X-Forwarded-For only from a trusted proxy', async () => {
    const trusted = await inject({
      method: 'POST',
      url: '/echo',
      payload: { name: 'a', count: 1 },
      remoteAddress: '127.0.0.1',
      headers: { 'x-forwarded-for': '203.0.113.9' },
    });
    expect(trusted.json().ip).toBe('203.0.113.9');
    const untrusted = await inject({
      method: 'POST',
      url: '/echo',
      payload: { name: 'a', count: 1 },
      remoteAddress: '10.1.2.3',
      headers: { 'x-forwarded-for': '203.0.113.9', 'x-real-ip': '203.0.113.10' },
    });
    expect(untrusted.json().ip).toBe('10.1.2.3');
    const realIp = await inject({
      method: 'POST',
      url: '/echo',
      payload: { name: 'a', count: 1 },
      remoteAddress: '127.0.0.1',
      headers: { 'x-real-ip': '198.51.100.7' },
    });
    expect(realIp.json().ip).toBe('198.51.100.7');
  });

  it('times out slow requests with 503 unless the route opts out', async () => {
    const res = await inject({ method: 'GET', url: '/slow' });
    expect(res.statusCode).toBe(503);
    expect(res.json().code).toBe('REQUEST_TIMEOUT');
    const allowed = await inject({ method: 'GET', url: '/slow-allowed' });
    expect(allowed.statusCode).toBe(200);
  });

  it('sends CORS headers for allowed origins only', async () => {
    const ok = await inject({ method: 'GET', url: '/health', headers: { origin: 'https://app.example' } });
    expect(ok.headers['access-control-allow-origin']).toBe('https://app.example');
    expect(String(ok.headers['access-control-expose-headers'])).toContain('x-next-cursor');
    const other = await inject({ method: 'GET', url: '/health', headers: { origin: 'https://evil.example' } });
    expect(other.headers['access-control-allow-origin']).toBeUndefined();
  });

  it('allows browsers to PUT and DELETE with the contract headers, and to read the response headers', async () => {
    for (const method of ['PUT', 'DELETE']) {
      const res = await inject({
        method: 'OPTIONS',
        url: '/objects/b/k',
        headers: {
          origin: 'https://app.example',
          'access-control-request-method': method,
          'access-control-request-headers': 'authorization,content-type,x-request-id,x-correlation-id,if-none-match',
        },
      });
      expect(res.statusCode).toBe(204);
      expect(res.headers['access-control-allow-origin']).toBe('https://app.example');
      const methods = String(res.headers['access-control-allow-methods']).split(/,\s*/);
      expect(methods).toEqual(expect.arrayContaining(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE']));
      const allowed = String(res.headers['access-control-allow-headers']).toLowerCase().split(/,\s*/);
      expect(allowed).toEqual(
        expect.arrayContaining([
          'authorization',
          'content-type',
          'x-request-id',
          'x-correlation-id',
          'idempotency-key',
          'range',
          'if-none-match',
          'if-modified-since',
          'if-match',
        ]),
      );
    }
    const ok = await inject({ method: 'GET', url: '/health', headers: { origin: 'https://app.example' } });
    const exposed = String(ok.headers['access-control-expose-headers']).split(/,\s*/);
    expect(exposed).toEqual(
      expect.arrayContaining([
        'x-request-id',
        'x-correlation-id',
        'etag',
        'content-range',
        'content-length',
        'last-modified',
        'x-next-start-after',
        'location',
      ]),
    );
  });

  it('serves health, metrics by route and status, OpenAPI, Swagger UI and ReDoc offline', async () => {
    const health = await inject({ method: 'GET', url: '/health' });
    expect(health.json()).toMatchObject({ status: 'UP', service: 'test-service', checks: { db: { status: 'UP' } } });
    const metrics = await inject({ method: 'GET', url: '/metrics' });
    expect(metrics.body).toMatch(/http_requests_total\{[^}]*route="\/missing"[^}]*status_code="404"/);
    expect(metrics.body).toContain('http_request_duration_seconds_bucket');
    const spec = await inject({ method: 'GET', url: '/docs/json' });
    expect(spec.json().paths['/echo'].post.requestBody).toBeDefined();
    const ui = await inject({ method: 'GET', url: '/docs/static/swagger-ui.css' });
    expect(ui.statusCode).toBe(200);
    const redoc = await inject({ method: 'GET', url: '/redoc' });
    expect(redoc.body).toContain('/redoc/redoc.standalone.js');
    expect(redoc.body).not.toMatch(/https?:\/\//);
    const bundle = await inject({ method: 'GET', url: '/redoc/redoc.standalone.js' });
    expect(bundle.statusCode).toBe(200);
    expect(bundle.body.length).toBeGreaterThan(100_000);
  });
});

describe('health with a failing dependency', () => {
  it('is 503 DOWN naming the dependency', async () => {
    const logger = createLogger({ service: 't', instanceId: 'i', level: 'silent' });
    const down = await createApp({
      service: 'x',
      description: 'x',
      config: baseConfigSchema.parse({}),
      logger,
      healthChecks: {
        database: async () => {
          throw new Error('connection refused');
        },
      },
    });
    const res = await down.inject({ method: 'GET', url: '/health' });
    expect(res.statusCode).toBe(503);
    expect(res.json()).toMatchObject({
      status: 'DOWN',
      checks: { database: { status: 'DOWN', error: 'connection refused' } },
    });
    await down.close();
  });
});

describe('request logger and abort signal (made on first use)', () => {
  const warnLogs = captureLogs();
  let quiet: App;
  const aborted: string[] = [];

  beforeAll(async () => {
    // As generous as the app's above: /note's first request fetches the issuer's keys over HTTP, which a busy machine
    // can take longer than a short limit for (and /note then answers 503, unlogged).
    const config = baseConfigSchema.parse({ request_timeout: '2s', access: issuer.accessConfig });
    const logger = createLogger({
      service: 'quiet',
      instanceId: 'i-2',
      level: 'warn',
      destination: warnLogs.destination,
    });
    quiet = await createApp({ service: 'quiet', description: 'test', config, logger });
    quiet.get('/note', async (request) => {
      request.log.info('not written at warn');
      request.log.warn({ detail: 1 }, 'written with the request IDs');
      return { ok: true };
    });
    quiet.get('/wait-for-abort', async (request) => {
      const signal = request.abortSignal;
      await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
      aborted.push((signal.reason as Error).message);
      return { late: true };
    });
    await quiet.ready();
  });

  afterAll(async () => {
    await quiet.close();
  });

  it('writes only enabled levels, each line with the request and correlation IDs', async () => {
    await quiet.inject({
      method: 'GET',
      url: '/note',
      headers: { ...caller.headers, 'x-request-id': 'q-1', 'x-correlation-id': 'c-1' },
    });
    const lines = warnLogs.lines().filter((l) => l.request_id === 'q-1');
    expect(lines.map((l) => l.msg)).toEqual(['written with the request IDs']);
    expect(lines[0]).toMatchObject({ correlation_id: 'c-1', detail: 1 });
  });

  it('aborts the signal a route asked for when the request times out', async () => {
    const res = await quiet.inject({ method: 'GET', url: '/wait-for-abort', headers: caller.headers });
    expect(res.statusCode).toBe(503);
    expect(aborted).toEqual([expect.stringMatching(/time/i)]);
  });
});
