/**
 * Users' API keys at the auth service: made, listed and revoked by the user's own sign-in, shown once, stored as a
 * hash, exchanged for short-lived tokens of their scopes, never able to make keys or reach another user's.
 */
import { SCOPES } from '@gpu/common';
import { lockWaiters } from '@gpu/common/testing';
import { sql } from 'kysely';
import { beforeEach, describe, expect, it } from 'vitest';
import { bearer, decodeJwt, registerAndLogin, testConfig, useAuth } from './helpers.ts';

const auth = useAuth(testConfig({ api_keys: { token_ttl: '90s', max_per_user: 3 } }));
let renter: Awaited<ReturnType<typeof registerAndLogin>>;

// A renter of their own for each test: the key limit counts per user.
beforeEach(async () => {
  renter = await registerAndLogin(auth.app, { roles: ['renter'] });
});

const keys = (method: string, token: string, payload?: unknown, suffix = '') =>
  auth.app.inject({
    method: method as 'GET',
    url: `/api/v1/auth/keys${suffix}`,
    headers: bearer(token),
    ...(payload === undefined ? {} : { payload: payload as Record<string, unknown> }),
  });

const exchange = (apiKey: string) =>
  auth.app.inject({
    method: 'POST',
    url: '/api/v1/auth/token',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    payload: new URLSearchParams({ grant_type: 'api_key', api_key: apiKey }).toString(),
  });

let names = 0;
const name = () => `key ${++names}`;

async function newKey(token: string, body: Record<string, unknown> = {}) {
  const res = await keys('POST', token, { name: name(), scopes: ['read'], ...body });
  expect(res.statusCode, res.body).toBe(201);
  return res.json() as { api_key: string; key: { id: string; prefix: string; scopes: string[] } };
}

describe('API keys', () => {
  it('shows a key once, stores only its hash, and lists it with its prefix and last use', async () => {
    const created = await newKey(renter.tokens.access_token, { scopes: ['offers', 'wallet:read', 'offers'] });
    expect(created.api_key).toMatch(/^gpk_[0-9a-f]{32}[A-Za-z0-9_-]{43}$/);
    expect(created.key.prefix).toBe(created.api_key.slice(0, 12));
    expect(created.key.scopes).toEqual(['offers', 'wallet:read']);
    const row = await auth.db.selectFrom('api_keys').selectAll().where('id', '=', created.key.id).executeTakeFirst();
    expect(JSON.stringify(row)).not.toContain(created.api_key.slice(12));
    const token = await exchange(created.api_key);
    expect(token.statusCode, token.body).toBe(200);
    expect(token.headers['cache-control']).toBe('no-store');
    const listed = await keys('GET', renter.tokens.access_token);
    const mine = listed.json().find((k: { id: string }) => k.id === created.key.id);
    expect(mine).toMatchObject({ prefix: created.key.prefix, revoked_at: null });
    expect(mine.last_used_at).not.toBeNull();
    expect(listed.body).not.toContain(created.api_key);
  });

  it("gives a token of the key's scopes and the user's roles, for the configured short time", async () => {
    const { api_key, key } = await newKey(renter.tokens.access_token, { scopes: ['sessions', 'offers'] });
    const answer = (await exchange(api_key)).json();
    expect(answer.expires_in).toBe(90);
    const claims = decodeJwt(answer.access_token);
    expect(claims).toMatchObject({ sub: renter.user.id, roles: ['renter'], scope: 'offers sessions', key_id: key.id });
    expect((claims.exp as number) - (claims.iat as number)).toBe(90);
    // It reads the user's profile with `read` only; this key has no read scope.
    const me = await auth.app.inject({ url: '/api/v1/auth/me', headers: bearer(answer.access_token) });
    expect(me.statusCode).toBe(403);
    expect(me.json()).toMatchObject({ code: 'INSUFFICIENT_SCOPE', required_scope: 'read' });
  });

  it('never lets a key make keys, list them, revoke them, or change roles', async () => {
    const { api_key, key } = await newKey(renter.tokens.access_token, { scopes: [...SCOPES] });
    const token = (await exchange(api_key)).json().access_token;
    for (const res of [
      await keys('POST', token, { name: name(), scopes: ['read'] }),
      await keys('GET', token),
      await keys('DELETE', token, undefined, `/${key.id}`),
      await auth.app.inject({
        method: 'PUT',
        url: `/api/v1/auth/users/${renter.user.id}/roles`,
        headers: bearer(token),
        payload: { roles: ['renter', 'admin'] },
      }),
    ]) {
      expect(res.statusCode, res.body).toBe(403);
    }
    expect((await keys('POST', token, { name: name(), scopes: ['read'] })).json().code).toBe('INSUFFICIENT_SCOPE');
  });

  it('tells a revoked or an expired key so, and answers an altered or unknown key with one answer', async () => {
    const revoked = await newKey(renter.tokens.access_token);
    // Its token reads the profile until the key is revoked; then this service refuses it at once, saying why.
    const before = (await exchange(revoked.api_key)).json().access_token;
    expect((await auth.app.inject({ url: '/api/v1/auth/me', headers: bearer(before) })).statusCode).toBe(200);
    const del = await keys('DELETE', renter.tokens.access_token, undefined, `/${revoked.key.id}`);
    expect(del.statusCode).toBe(200);
    expect(del.json().revoked_at).not.toBeNull();
    const after = await auth.app.inject({ url: '/api/v1/auth/me', headers: bearer(before) });
    expect({ status: after.statusCode, code: after.json().code }).toEqual({ status: 401, code: 'API_KEY_REVOKED' });
    expect(after.headers['www-authenticate']).toBe('Bearer');
    // Taken while it runs, then its expiry moved into the past as time would move it: a short real expiry would let
    // a busy machine run out the key before the first exchange.
    const expiring = await newKey(renter.tokens.access_token, {
      expires_at: new Date(Date.now() + 3_600_000).toISOString(),
    });
    expect((await exchange(expiring.api_key)).statusCode).toBe(200);
    await auth.db
      .updateTable('api_keys')
      .set({ expires_at: new Date(Date.now() - 1000) })
      .where('id', '=', expiring.key.id)
      .execute();
    const altered = `${revoked.api_key.slice(0, -1)}${revoked.api_key.endsWith('A') ? 'B' : 'A'}`;
    const answers = [];
    for (const bad of [revoked.api_key, expiring.api_key, altered, 'gpk_nothing', `gpk_${'0'.repeat(75)}`]) {
      const res = await exchange(bad);
      answers.push({ status: res.statusCode, code: res.json().code, error: res.json().error });
    }
    const invalid = { status: 401, code: 'INVALID_CLIENT', error: 'invalid_client' };
    expect(answers).toEqual([
      { status: 401, code: 'API_KEY_REVOKED', error: 'invalid_client' },
      { status: 401, code: 'API_KEY_EXPIRED', error: 'invalid_client' },
      invalid,
      invalid,
      invalid,
    ]);
    // Listed as revoked only when asked.
    const active = (await keys('GET', renter.tokens.access_token)).json().map((k: { id: string }) => k.id);
    expect(active).not.toContain(revoked.key.id);
    const all = (await keys('GET', renter.tokens.access_token, undefined, '?include_revoked=true')).json();
    expect(all.map((k: { id: string }) => k.id)).toContain(revoked.key.id);
  });

  it("answers another user's key 404, and no admin role ever reaches a key's token", async () => {
    const other = await registerAndLogin(auth.app, { roles: ['renter'] });
    const mine = await newKey(renter.tokens.access_token);
    expect((await keys('DELETE', other.tokens.access_token, undefined, `/${mine.key.id}`)).statusCode).toBe(404);
    expect((await keys('GET', other.tokens.access_token)).json()).toEqual([]);
    await auth.db
      .updateTable('users')
      .set({ roles: ['renter', 'admin'] })
      .where('id', '=', other.user.id)
      .execute();
    const adminLogin = await auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/login',
      payload: { email: other.email, password: other.password },
    });
    const adminKey = await newKey(adminLogin.json().access_token);
    expect(decodeJwt((await exchange(adminKey.api_key)).json().access_token).roles).toEqual(['renter']);
    // Left with admin alone, the key's user has no role a key carries: told so, never a token no service takes.
    await auth.db
      .updateTable('users')
      .set({ roles: ['admin'] })
      .where('id', '=', other.user.id)
      .execute();
    const refused = await exchange(adminKey.api_key);
    expect(refused.statusCode, refused.body).toBe(401);
    expect(refused.json()).toMatchObject({ code: 'API_KEY_NO_ROLE', error: 'invalid_client' });
  });

  it('holds at most api_keys.max_per_user keys at once, and one name once', async () => {
    const user = await registerAndLogin(auth.app, { roles: ['provider'] });
    const token = user.tokens.access_token;
    const first = await newKey(token, { name: 'ci' });
    const again = await keys('POST', token, { name: 'ci', scopes: ['read'] });
    expect(again.statusCode).toBe(409);
    expect(again.json().code).toBe('API_KEY_NAME_TAKEN');
    await newKey(token);
    await newKey(token);
    const over = await keys('POST', token, { name: name(), scopes: ['read'] });
    expect(over.json().code).toBe('TOO_MANY_API_KEYS');
    await keys('DELETE', token, undefined, `/${first.key.id}`);
    await newKey(token, { name: 'ci' });

    // Made at once, past the limit: counted one at a time, so three of six are refused. (The six are held at the
    // account, locked here, until each waits: then they go together.)
    const other = await registerAndLogin(auth.app, { roles: ['provider'] });
    let burst: ReturnType<typeof keys>[] = [];
    await auth.db.transaction().execute(async (trx) => {
      await sql`SELECT 1 FROM users WHERE id = ${other.user.id} FOR UPDATE`.execute(trx);
      burst = Array.from({ length: 6 }, () =>
        keys('POST', other.tokens.access_token, { name: name(), scopes: ['read'] }),
      );
      await lockWaiters(auth.db, 6);
    });
    expect((await Promise.all(burst)).map((r) => r.statusCode).sort()).toEqual([201, 201, 201, 409, 409, 409]);
    const token2 = other.tokens.access_token;
    const listed = (await keys('GET', token2)).json();
    expect(listed).toHaveLength(3);
  });

  it('refuses scopes it does not know and expiries in the past (400)', async () => {
    const token = renter.tokens.access_token;
    expect((await keys('POST', token, { name: name(), scopes: ['everything'] })).statusCode).toBe(400);
    expect((await keys('POST', token, { name: name(), scopes: [] })).statusCode).toBe(400);
    const past = await keys('POST', token, { name: name(), scopes: ['read'], expires_at: '2020-01-01T00:00:00Z' });
    expect(past.statusCode).toBe(400);
  });
});
