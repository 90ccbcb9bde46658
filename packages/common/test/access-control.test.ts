import { SignJWT, UnsecuredJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { type App, baseConfigSchema, createApp, createLogger, createTokenVerifier, mayActFor } from '../src/index.ts';
import { captureLogs, startTestIssuer, type TestIssuer } from '../src/testing/index.ts';

let issuer: TestIssuer;
let app: App;

async function buildApp(access: Record<string, unknown>, logs = captureLogs()) {
  const logger = createLogger({ service: 't', instanceId: 'i', level: 'info', destination: logs.destination });
  const config = baseConfigSchema.parse({ access });
  const a = await createApp({ service: 'test-service', description: 't', config, logger });
  a.get('/mine', async (request) => ({ ...request.principal }));
  a.post('/things', { schema: { body: z.object({ name: z.string().min(3) }) } }, async (request) => ({
    name: request.body.name,
  }));
  a.get('/providers-only', { config: { roles: ['provider', 'admin'] } }, async () => ({ ok: true }));
  a.get(
    '/open',
    { config: { public: true }, schema: { response: { 200: z.object({ open: z.boolean() }) } } },
    async () => ({
      open: true,
    }),
  );
  await a.ready();
  return a;
}

beforeAll(async () => {
  issuer = await startTestIssuer();
  app = await buildApp(issuer.accessConfig);
});

afterAll(async () => {
  await app?.close();
  await issuer?.close();
});

const get = (url: string, token?: string) =>
  app.inject({ method: 'GET', url, headers: token ? { authorization: `Bearer ${token}` } : {} });

describe('access control (every route needs a token unless public)', () => {
  it('passes a valid token and gives the route its principal', async () => {
    const renter = await issuer.user(['renter']);
    const res = await get('/mine', renter.token);
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ subject: renter.id, kind: 'user', roles: ['renter'], actsFor: renter.id });
  });

  it('answers 401 with WWW-Authenticate to anonymous, forged, alg=none, expired and foreign tokens', async () => {
    const now = Math.floor(Date.now() / 1000);
    const cases: Array<[string, string | undefined, string]> = [
      ['anonymous', undefined, 'MISSING_TOKEN'],
      ['forged signature', await issuer.sign({}, { forged: true }), 'INVALID_TOKEN'],
      [
        'alg none',
        new UnsecuredJWT({
          iss: issuer.issuer,
          aud: issuer.audience,
          sub: crypto.randomUUID(),
          roles: ['admin'],
          jti: 'x',
        })
          .setIssuedAt()
          .setExpirationTime('10m')
          .encode(),
        'INVALID_TOKEN',
      ],
      ['expired', await issuer.sign({ iat: now - 1200, exp: now - 600 }), 'TOKEN_EXPIRED'],
      ['another audience', await issuer.sign({ aud: 'elsewhere' }), 'INVALID_TOKEN'],
      ['another issuer', await issuer.sign({ iss: 'someone-else' }), 'INVALID_TOKEN'],
      ['issued in the future', await issuer.sign({ iat: now + 600, exp: now + 1200 }), 'INVALID_TOKEN'],
      ['sub not a user ID', await issuer.sign({ sub: 'u-1' }), 'INVALID_TOKEN'],
      ['unknown role', await issuer.sign({ roles: ['root'] }), 'INVALID_TOKEN'],
      ['daemon without owner', await issuer.sign({ roles: ['daemon'] }), 'INVALID_TOKEN'],
    ];
    for (const [what, token, code] of cases) {
      const res = await get('/mine', token);
      expect({ what, status: res.statusCode, code: res.json().code }).toEqual({ what, status: 401, code });
      expect(res.headers['www-authenticate']).toBe('Bearer');
    }
    const tampered = (await issuer.user(['renter'])).token.split('.');
    tampered[1] = Buffer.from(
      JSON.stringify({ ...JSON.parse(Buffer.from(tampered[1]!, 'base64url').toString()), roles: ['admin'] }),
    ).toString('base64url');
    expect((await get('/mine', tampered.join('.'))).statusCode).toBe(401);
  });

  it('authenticates before reading the body: an anonymous bad body gets 401, not a schema description', async () => {
    const res = await app.inject({ method: 'POST', url: '/things', payload: { name: 1 } });
    expect(res.statusCode).toBe(401);
    expect(res.body).not.toContain('name');
    const renter = await issuer.user(['renter']);
    const bad = await app.inject({ method: 'POST', url: '/things', payload: { name: 1 }, headers: renter.headers });
    expect(bad.statusCode).toBe(400);
  });

  it('answers 403 ROLE_REQUIRED when the token holds none of the route roles', async () => {
    const renter = await get('/providers-only', (await issuer.user(['renter'])).token);
    expect(renter.statusCode).toBe(403);
    expect(renter.json().code).toBe('ROLE_REQUIRED');
    expect((await get('/providers-only', (await issuer.user(['renter', 'provider'])).token)).statusCode).toBe(200);
    expect((await get('/providers-only', (await issuer.client('scheduler')).token)).statusCode).toBe(403);
  });

  it('leaves public routes, health, metrics, docs and CORS preflights open', async () => {
    expect((await get('/open')).statusCode).toBe(200);
    expect((await get('/health')).statusCode).toBe(200);
    expect((await get('/metrics')).statusCode).toBe(200);
    expect((await get('/docs/json')).statusCode).toBe(200);
    const preflight = await app.inject({
      method: 'OPTIONS',
      url: '/things',
      headers: { origin: 'https://app.example', 'access-control-request-method': 'POST' },
    });
    expect(preflight.statusCode).toBe(204);
  });

  it('declares the bearer scheme and 401/403 on protected routes of the OpenAPI document, not on public ones', async () => {
    const spec = (await get('/docs/json')).json();
    // The root requires the bearer scheme; a public operation says it needs nothing.
    expect(spec.security).toEqual([{ bearerAuth: [] }]);
    expect(spec.paths['/mine'].get.security).toBeUndefined();
    expect(Object.keys(spec.paths['/things'].post.responses)).toEqual(expect.arrayContaining(['401', '403']));
    expect(spec.paths['/open'].get.security).toEqual([]);
    expect(spec.paths['/open'].get.responses['401']).toBeUndefined();
  });

  it('gives machine clients their own principal; a daemon acts for its provider owner', async () => {
    const owner = crypto.randomUUID();
    const daemon = await issuer.client('daemon', owner);
    const res = (await get('/mine', daemon.token)).json();
    expect(res).toMatchObject({
      subject: daemon.id,
      kind: 'client',
      clientId: daemon.id,
      roles: ['daemon'],
      actsFor: owner,
    });
    expect(mayActFor(res, owner)).toBe(true);
    expect(mayActFor(res, crypto.randomUUID())).toBe(false);
    const scheduler = (await get('/mine', (await issuer.client('scheduler')).token)).json();
    expect(scheduler.actsFor).toBeUndefined();
    expect(mayActFor(scheduler, owner)).toBe(false);
    expect(mayActFor((await get('/mine', (await issuer.client('service')).token)).json(), owner)).toBe(true);
  });

  it('answers 503 while the JWKS cannot be fetched, and takes a new signing key by its kid', async () => {
    const down = await buildApp({ ...issuer.accessConfig, jwks_url: 'http://127.0.0.1:9/.well-known/jwks.json' });
    try {
      const res = await down.inject({ method: 'GET', url: '/mine', headers: (await issuer.user(['renter'])).headers });
      expect(res.statusCode).toBe(503);
    } finally {
      await down.close();
    }
  });

  it('lets an explicit access.enabled=false act as an unchecked admin, with a warning at start-up', async () => {
    const logs = captureLogs();
    const open = await buildApp({ enabled: false }, logs);
    try {
      const res = await open.inject({ method: 'GET', url: '/providers-only' });
      expect(res.statusCode).toBe(200);
      const warning = logs.lines().find((l) => String(l.msg).startsWith('access control is OFF'));
      expect(warning?.level).toBe('warn');
    } finally {
      await open.close();
    }
  });

  it('verifies HS256 tokens with a shared secret, and does not serve a cached token past its expiry', async () => {
    const secret = 'a-shared-secret-of-at-least-32-characters';
    const verifier = createTokenVerifier({ issuer: 'auth', audience: 'platform', secret, clockToleranceSeconds: 0 });
    const now = Math.floor(Date.now() / 1000);
    const sub = crypto.randomUUID();
    const shortLived = await new SignJWT({
      iss: 'auth',
      aud: 'platform',
      sub,
      iat: now,
      // Five seconds: still valid at the first check on a loaded machine (a one-second token was not, once).
      exp: now + 5,
      jti: 'j',
      roles: ['renter'],
    })
      .setProtectedHeader({ alg: 'HS256' })
      .sign(new TextEncoder().encode(secret));
    await expect(verifier.verify(shortLived)).resolves.toMatchObject({ sub });
    await new Promise((r) => setTimeout(r, Math.max(0, (now + 5) * 1000 + 200 - Date.now())));
    await expect(verifier.verify(shortLived)).rejects.toMatchObject({ code: 'TOKEN_EXPIRED' });
    // A queued message is judged as of when it was sent.
    await expect(verifier.verify(shortLived, new Date(now * 1000))).resolves.toMatchObject({ sub });
  });
});
