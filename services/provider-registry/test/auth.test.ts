import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gpu, type Harness, providerBody, startHarness } from './helpers.ts';

let h: Harness;

/** A token for the user `sub` (a UUID) with `roles`, from the issuer the app trusts. */
const as = async (sub: string, roles: string[]) => ({
  authorization: `Bearer ${await h.issuer.sign({ sub, roles })}`,
});

/** Stable user IDs for the names the tests use. */
const ids = new Map<string, string>();
const id = (name: string) => {
  if (!ids.has(name)) ids.set(name, randomUUID());
  return ids.get(name)!;
};

beforeAll(async () => {
  h = await startHarness({ nats: false });
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

describe('access control (on by default)', () => {
  it('answers 401 with WWW-Authenticate without a valid token, and keeps /health open', async () => {
    const none = await h.app.inject({ method: 'GET', url: '/providers', headers: { authorization: undefined } });
    expect(none.statusCode).toBe(401);
    expect(none.headers['www-authenticate']).toBe('Bearer');
    const forged = await h.app.inject({
      method: 'POST',
      url: '/providers',
      payload: providerBody(),
      headers: { authorization: `Bearer ${await h.issuer.sign({ sub: id('u'), roles: ['admin'] }, { forged: true })}` },
    });
    expect(forged.statusCode).toBe(401);
    expect((await h.app.inject({ method: 'GET', url: '/health' })).statusCode).toBe(200);
  });

  it('refuses renters with 403', async () => {
    const res = await h.app.inject({ method: 'GET', url: '/providers', headers: await as(id('r-1'), ['renter']) });
    expect(res.statusCode).toBe(403);
    expect(res.json().code).toBe('ROLE_REQUIRED');
  });

  it('lets a provider register only its own machines', async () => {
    const own = await registerAs(id('prov-a'));
    expect(own.owner_id).toBe(id('prov-a'));
    const foreign = await h.app.inject({
      method: 'POST',
      url: '/providers',
      payload: providerBody({ owner_id: id('prov-b') }),
      headers: await as(id('prov-a'), ['provider']),
    });
    expect(foreign.statusCode).toBe(403);
    expect(foreign.json().code).toBe('NOT_PROVIDER_OWNER');
  });

  it('lets a provider heartbeat, update and delete only its own machines', async () => {
    const mine = await registerAs(id('prov-c'));
    const theirs = await registerAs(id('prov-d'));
    const headers = await as(id('prov-c'), ['provider']);
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
      payload: providerBody({ owner_id: id('prov-d') }),
      headers,
    });
    expect(put.statusCode).toBe(403);
    expect((await h.app.inject({ method: 'DELETE', url: `/providers/${theirs.id}`, headers })).statusCode).toBe(403);
    expect((await h.app.inject({ method: 'GET', url: `/providers/${theirs.id}`, headers })).statusCode).toBe(403);
    expect((await h.app.inject({ method: 'DELETE', url: `/providers/${mine.id}`, headers })).statusCode).toBe(200);
  });

  it('shows a provider only its own machines and an admin (the scheduler) all of them', async () => {
    await registerAs(id('prov-e'));
    await registerAs(id('prov-f'));
    const own = await h.app.inject({
      method: 'GET',
      url: '/providers?limit=1000',
      headers: await as(id('prov-e'), ['provider']),
    });
    expect(own.json().map((p: { owner_id: string }) => p.owner_id)).toEqual([id('prov-e')]);
    const all = await h.app.inject({
      method: 'GET',
      url: '/providers?limit=1000',
      headers: await as(id('sched'), ['admin']),
    });
    const owners = new Set(all.json().map((p: { owner_id: string }) => p.owner_id));
    expect(owners.has(id('prov-e')) && owners.has(id('prov-f'))).toBe(true);
  });

  it('lets an admin change any provider', async () => {
    const p = await registerAs(id('prov-g'));
    const res = await h.app.inject({
      method: 'PATCH',
      url: `/providers/${p.id}/status`,
      payload: { status: 'maintenance' },
      headers: await as(id('ops'), ['admin']),
    });
    expect(res.statusCode).toBe(200);
    const foreign = await h.app.inject({
      method: 'POST',
      url: '/providers',
      payload: providerBody({ owner_id: id('someone') }),
      headers: await as(id('ops'), ['admin']),
    });
    expect(foreign.statusCode).toBe(201);
  });

  it('documents the bearer requirement in OpenAPI', async () => {
    const spec = (await h.app.inject({ method: 'GET', url: '/docs/json' })).json();
    // Declared once at the root; only a public operation says otherwise (`security: []`).
    expect(spec.security).toEqual([{ bearerAuth: [] }]);
    expect(spec.paths['/providers'].get).not.toHaveProperty('security');
  });
});
