import { randomUUID } from 'node:crypto';
import { createTokenVerifier } from '@gpu/common';
import { SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gpu, type Harness, providerBody, startHarness } from './helpers.ts';

const SECRET = 'registry-test-secret-with-enough-length';
const ISSUER = 'https://auth.test';
const AUDIENCE = 'gpu-platform';
let h: Harness;

async function token(sub: string, roles: string[]) {
  return new SignJWT({ roles })
    .setProtectedHeader({ alg: 'HS256' })
    .setIssuer(ISSUER)
    .setAudience(AUDIENCE)
    .setSubject(sub)
    .setJti(randomUUID())
    .setIssuedAt()
    .setExpirationTime('5m')
    .sign(new TextEncoder().encode(SECRET));
}

const as = async (sub: string, roles: string[]) => ({ authorization: `Bearer ${await token(sub, roles)}` });

beforeAll(async () => {
  h = await startHarness({
    nats: false,
    config: { auth: { enabled: true, issuer: ISSUER, audience: AUDIENCE, secret: SECRET } },
    verifier: createTokenVerifier({ issuer: ISSUER, audience: AUDIENCE, secret: SECRET }),
  });
});
afterAll(async () => {
  await h.close();
  await h.testDb.drop();
});

async function registerAs(sub: string, over: Record<string, unknown> = {}) {
  const res = await h.app.inject({
    method: 'POST',
    url: '/providers',
    payload: providerBody({ owner_id: sub, gpus: [gpu()], ...over }),
    headers: await as(sub, ['provider']),
  });
  expect(res.statusCode).toBe(201);
  return res.json() as { id: string; owner_id: string };
}

describe('JWT enforcement (auth.enabled)', () => {
  it('answers 401 with WWW-Authenticate without a valid token, and keeps /health open', async () => {
    const none = await h.app.inject({ method: 'GET', url: '/providers' });
    expect(none.statusCode).toBe(401);
    expect(none.headers['www-authenticate']).toBe('Bearer');
    const forged = await h.app.inject({
      method: 'POST',
      url: '/providers',
      payload: providerBody(),
      headers: { authorization: `Bearer ${(await token('u', ['admin'])).slice(0, -4)}abcd` },
    });
    expect(forged.statusCode).toBe(401);
    expect((await h.app.inject({ method: 'GET', url: '/health' })).statusCode).toBe(200);
  });

  it('refuses renters with 403', async () => {
    const res = await h.app.inject({ method: 'GET', url: '/providers', headers: await as('r-1', ['renter']) });
    expect(res.statusCode).toBe(403);
    expect(res.json().code).toBe('ROLE_REQUIRED');
  });

  it('lets a provider register only its own machines', async () => {
    const own = await registerAs('prov-a');
    expect(own.owner_id).toBe('prov-a');
    const foreign = await h.app.inject({
      method: 'POST',
      url: '/providers',
      payload: providerBody({ owner_id: 'prov-b' }),
      headers: await as('prov-a', ['provider']),
    });
    expect(foreign.statusCode).toBe(403);
    expect(foreign.json().code).toBe('NOT_PROVIDER_OWNER');
  });

  it('lets a provider heartbeat, update and delete only its own machines', async () => {
    const mine = await registerAs('prov-c');
    const theirs = await registerAs('prov-d');
    const headers = await as('prov-c', ['provider']);
    expect((await h.app.inject({ method: 'POST', url: `/providers/${mine.id}/heartbeat`, headers })).statusCode).toBe(
      200,
    );
    const beat = await h.app.inject({ method: 'POST', url: `/providers/${theirs.id}/heartbeat`, headers });
    expect(beat.statusCode).toBe(403);
    const patch = await h.app.inject({
      method: 'PATCH',
      url: `/providers/${theirs.id}/status`,
      payload: { status: 'busy' },
      headers,
    });
    expect(patch.statusCode).toBe(403);
    const put = await h.app.inject({
      method: 'PUT',
      url: `/providers/${mine.id}`,
      payload: providerBody({ owner_id: 'prov-d' }),
      headers,
    });
    expect(put.statusCode).toBe(403);
    expect((await h.app.inject({ method: 'DELETE', url: `/providers/${theirs.id}`, headers })).statusCode).toBe(403);
    expect((await h.app.inject({ method: 'GET', url: `/providers/${theirs.id}`, headers })).statusCode).toBe(403);
    expect((await h.app.inject({ method: 'DELETE', url: `/providers/${mine.id}`, headers })).statusCode).toBe(200);
  });

  it('shows a provider only its own machines and an admin (the scheduler) all of them', async () => {
    await registerAs('prov-e');
    await registerAs('prov-f');
    const own = await h.app.inject({
      method: 'GET',
      url: '/providers?limit=1000',
      headers: await as('prov-e', ['provider']),
    });
    expect(own.json().map((p: { owner_id: string }) => p.owner_id)).toEqual(['prov-e']);
    const all = await h.app.inject({
      method: 'GET',
      url: '/providers?limit=1000',
      headers: await as('sched', ['admin']),
    });
    const owners = new Set(all.json().map((p: { owner_id: string }) => p.owner_id));
    expect(owners.has('prov-e') && owners.has('prov-f')).toBe(true);
  });

  it('lets an admin change any provider', async () => {
    const p = await registerAs('prov-g');
    const res = await h.app.inject({
      method: 'PATCH',
      url: `/providers/${p.id}/status`,
      payload: { status: 'maintenance' },
      headers: await as('ops', ['admin']),
    });
    expect(res.statusCode).toBe(200);
    const foreign = await h.app.inject({
      method: 'POST',
      url: '/providers',
      payload: providerBody({ owner_id: 'someone' }),
      headers: await as('ops', ['admin']),
    });
    expect(foreign.statusCode).toBe(201);
  });

  it('documents the bearer requirement in OpenAPI', async () => {
    const spec = (await h.app.inject({ method: 'GET', url: '/docs/json' })).json();
    expect(spec.paths['/providers'].get.security).toEqual([{ bearerAuth: [] }]);
  });
});
