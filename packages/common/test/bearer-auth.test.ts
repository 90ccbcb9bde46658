import { SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type App,
  baseConfigSchema,
  bearerAuth,
  createApp,
  createLogger,
  createTokenVerifier,
  requireAuth,
  requireRole,
} from '../src/index.ts';
import { captureLogs } from '../src/testing/index.ts';

const SECRET = 'a-shared-secret-of-at-least-32-characters';
let app: App;

function token(claims: Record<string, unknown> = {}, secret = SECRET) {
  const now = Math.floor(Date.now() / 1000);
  return new SignJWT({
    iss: 'auth',
    aud: 'platform',
    sub: 'u-1',
    iat: now,
    exp: now + 60,
    jti: 'j',
    roles: ['renter'],
    ...claims,
  })
    .setProtectedHeader({ alg: 'HS256' })
    .sign(new TextEncoder().encode(secret));
}

beforeAll(async () => {
  const logger = createLogger({
    service: 't',
    instanceId: 'i',
    level: 'silent',
    destination: captureLogs().destination,
  });
  app = await createApp({ service: 'test-service', description: 't', config: baseConfigSchema.parse({}), logger });
  await app.register(bearerAuth, {
    verifier: createTokenVerifier({ issuer: 'auth', audience: 'platform', secret: SECRET }),
  });
  app.get('/mine', { onRequest: requireAuth }, async (request) => ({ sub: request.auth!.sub }));
  app.get('/providers-only', { onRequest: requireRole('provider', 'admin') }, async () => ({ ok: true }));
  await app.ready();
});

afterAll(async () => {
  await app.close();
});

const get = async (url: string, bearer?: string) =>
  app.inject({ method: 'GET', url, headers: bearer ? { authorization: `Bearer ${bearer}` } : {} });

describe('bearerAuth, requireAuth and requireRole', () => {
  it('passes a valid token and exposes its claims', async () => {
    const res = await get('/mine', await token());
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ sub: 'u-1' });
  });

  it('answers 401 with WWW-Authenticate for a missing, invalid or expired token', async () => {
    const missing = await get('/mine');
    expect(missing.statusCode).toBe(401);
    expect(missing.headers['www-authenticate']).toBe('Bearer');
    expect((await get('/mine', await token({}, 'another-secret-of-at-least-32-chars!!'))).json().code).toBe(
      'INVALID_TOKEN',
    );
    expect((await get('/mine', await token({ aud: 'elsewhere' }))).statusCode).toBe(401);
    const past = Math.floor(Date.now() / 1000) - 600;
    expect((await get('/mine', await token({ iat: past - 60, exp: past }))).json().code).toBe('TOKEN_EXPIRED');
  });

  it('answers 403 when no role is allowed and 200 when one is', async () => {
    const renter = await get('/providers-only', await token());
    expect(renter.statusCode).toBe(403);
    expect(renter.json().code).toBe('ROLE_REQUIRED');
    expect((await get('/providers-only', await token({ roles: ['renter', 'provider'] }))).statusCode).toBe(200);
  });

  it('does not serve a cached token past its expiry', async () => {
    const verifier = createTokenVerifier({
      issuer: 'auth',
      audience: 'platform',
      secret: SECRET,
      clockToleranceSeconds: 0,
    });
    const now = Math.floor(Date.now() / 1000);
    const shortLived = await token({ iat: now, exp: now + 1 });
    await expect(verifier.verify(shortLived)).resolves.toMatchObject({ sub: 'u-1' });
    await new Promise((r) => setTimeout(r, 2100));
    await expect(verifier.verify(shortLived)).rejects.toMatchObject({ code: 'TOKEN_EXPIRED' });
  });
});
