/**
 * POST /api/v1/auth/credentials/live: which credentials behind tokens verified elsewhere are still live, by the rule
 * this service applies to its own tokens (a revoked or older-epoch key, a signed-out sign-in, a user gone), many at
 * once in one query, for platform services and admins only.
 */
import { randomUUID } from 'node:crypto';
import { UNCHECKED_PRINCIPAL } from '@gpu/common';
import type { KyselyPlugin } from 'kysely';
import { beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.ts';
import { insertUser } from '../src/db/user-repository.ts';
import { startAfresh } from '../src/domain/accounts/index.ts';
import { createClient } from '../src/domain/clients.ts';
import { issueAccessToken, issueClientToken } from '../src/domain/token-pair.ts';
import { bearer, decodeJwt, GOOD_PASSWORD, registerAndLogin, testConfig, uniqueEmail, useAuth } from './helpers.ts';

const auth = useAuth(testConfig());
const API = '/api/v1/auth';
let service: Record<string, string>;
let admin: Record<string, string>;

interface Credential {
  user_id: string;
  key_id?: string;
  sign_in_id?: string;
}

beforeAll(async () => {
  const { client } = await createClient(auth.ctx, UNCHECKED_PRINCIPAL, {
    name: `live-${randomUUID()}`,
    role: 'service',
  });
  service = bearer((await issueClientToken(auth.ctx, client)).token);
  const row = await insertUser(auth.db, { email: uniqueEmail('admin'), password_hash: 'x', roles: ['admin'] });
  admin = bearer((await issueAccessToken(auth.ctx, row)).token);
});

const ask = (headers: Record<string, string>, payload: unknown, app = auth.app) =>
  app.inject({ method: 'POST', url: `${API}/credentials/live`, headers, payload: payload as object });

async function answer(credentials: Credential[], headers = service) {
  const res = await ask(headers, { credentials });
  expect(res.statusCode, res.body).toBe(200);
  return res.json() as { live: boolean[]; reasons: (string | null)[] };
}

/** A key of the signed-in user: its ID and a token of it. */
async function newKey(accessToken: string) {
  const made = await auth.app.inject({
    method: 'POST',
    url: `${API}/keys`,
    headers: bearer(accessToken),
    payload: { name: `key-${randomUUID()}`, scopes: ['read'] },
  });
  expect(made.statusCode, made.body).toBe(201);
  const { api_key, key } = made.json() as { api_key: string; key: { id: string } };
  const exchanged = await auth.app.inject({
    method: 'POST',
    url: `${API}/token`,
    payload: { grant_type: 'api_key', api_key },
  });
  expect(exchanged.statusCode, exchanged.body).toBe(200);
  return { id: key.id, token: exchanged.json().access_token as string };
}

/** Another sign-in of the user: its ID, and its token pair. */
async function signIn(email: string) {
  const res = await auth.app.inject({
    method: 'POST',
    url: `${API}/login`,
    payload: { email, password: GOOD_PASSWORD },
  });
  expect(res.statusCode, res.body).toBe(200);
  const tokens = res.json() as { access_token: string; refresh_token: string };
  return { id: decodeJwt(tokens.access_token).sid as string, ...tokens };
}

/** What this service answers a token at one of its own routes: the same rule (status and code). */
async function ownAnswer(token: string) {
  const res = await auth.app.inject({ url: `${API}/me`, headers: bearer(token) });
  return { status: res.statusCode, code: res.statusCode === 200 ? null : (res.json().code as string) };
}

describe('POST /credentials/live', () => {
  it('answers each credential live or not, in the order asked, with why, as this service judges its own tokens', async () => {
    const renter = await registerAndLogin(auth.app, { roles: ['renter'] });
    const other = await registerAndLogin(auth.app, { roles: ['renter'] });
    const userId = renter.user.id;
    const liveKey = await newKey(renter.tokens.access_token);
    const revokedKey = await newKey(renter.tokens.access_token);
    const revoked = await auth.app.inject({
      method: 'DELETE',
      url: `${API}/keys/${revokedKey.id}`,
      headers: bearer(renter.tokens.access_token),
    });
    expect(revoked.statusCode, revoked.body).toBe(200);
    const othersKey = await newKey(other.tokens.access_token);
    const current = { id: decodeJwt(renter.tokens.access_token).sid as string, ...renter.tokens };
    const phone = await signIn(renter.email);
    const signedOut = await auth.app.inject({
      method: 'DELETE',
      url: `${API}/sign-ins/${phone.id}`,
      headers: bearer(current.access_token),
    });
    expect(signedOut.statusCode, signedOut.body).toBe(204);
    const laptop = await signIn(renter.email);
    const loggedOut = await auth.app.inject({
      method: 'POST',
      url: `${API}/logout`,
      payload: { refresh_token: laptop.refresh_token },
    });
    expect(loggedOut.statusCode, loggedOut.body).toBe(204);
    const nobody = randomUUID();

    const asked: [Credential, boolean, string | null][] = [
      [{ user_id: userId, key_id: liveKey.id }, true, null],
      [{ user_id: userId, key_id: revokedKey.id }, false, 'revoked'],
      [{ user_id: userId, key_id: othersKey.id }, false, 'unknown_key'],
      [{ user_id: other.user.id, key_id: othersKey.id }, true, null],
      [{ user_id: userId, key_id: randomUUID() }, false, 'unknown_key'],
      [{ user_id: userId, sign_in_id: current.id }, true, null],
      [{ user_id: userId, sign_in_id: phone.id }, false, 'signed_out'],
      [{ user_id: userId, sign_in_id: laptop.id }, false, 'signed_out'],
      [{ user_id: other.user.id, sign_in_id: current.id }, false, 'signed_out'],
      [{ user_id: userId }, true, null],
      [{ user_id: nobody }, false, 'user_gone'],
      [{ user_id: nobody, key_id: liveKey.id }, false, 'user_gone'],
      [{ user_id: nobody, sign_in_id: current.id }, false, 'user_gone'],
    ];
    expect(await answer(asked.map(([c]) => c))).toEqual({
      live: asked.map(([, live]) => live),
      reasons: asked.map(([, , reason]) => reason),
    });

    // The same verdicts as this service's own refusals of those tokens.
    expect(await ownAnswer(liveKey.token)).toEqual({ status: 200, code: null });
    expect(await ownAnswer(revokedKey.token)).toEqual({ status: 401, code: 'API_KEY_REVOKED' });
    expect(await ownAnswer(current.access_token)).toEqual({ status: 200, code: null });
    expect(await ownAnswer(phone.access_token)).toEqual({ status: 401, code: 'SIGN_IN_ENDED' });
    expect(await ownAnswer(laptop.access_token)).toEqual({ status: 401, code: 'SIGN_IN_ENDED' });
  });

  it('ends every key and sign-in of an account started afresh, and one of the earlier epoch that a race let live', async () => {
    const renter = await registerAndLogin(auth.app, { roles: ['renter'] });
    const userId = renter.user.id;
    const key = await newKey(renter.tokens.access_token);
    const sid = decodeJwt(renter.tokens.access_token).sid as string;
    const credentials = [
      { user_id: userId, key_id: key.id },
      { user_id: userId, sign_in_id: sid },
      { user_id: userId },
    ];
    expect(await answer(credentials)).toEqual({ live: [true, true, true], reasons: [null, null, null] });

    await auth.db.transaction().execute((trx) => startAfresh(trx, userId, 'a new hash', 'test', new Date()));
    expect(await answer(credentials)).toEqual({
      live: [false, false, true],
      reasons: ['revoked', 'signed_out', null],
    });

    // A key and a sign-in of the epoch before that nothing revoked (made by a request that raced the fresh start).
    await auth.db.updateTable('api_keys').set({ revoked_at: null }).where('id', '=', key.id).execute();
    await auth.db
      .updateTable('refresh_tokens')
      .set({ revoked_at: null, revoked_reason: null })
      .where('family_id', '=', sid)
      .execute();
    expect(await answer(credentials)).toEqual({
      live: [false, false, true],
      reasons: ['revoked', 'signed_out', null],
    });
    expect(await ownAnswer(key.token)).toEqual({ status: 401, code: 'API_KEY_REVOKED' });
    expect(await ownAnswer(renter.tokens.access_token)).toEqual({ status: 401, code: 'SIGN_IN_ENDED' });
  });

  it(`takes 1 to 1000 credentials, answered in one query; more, none or malformed ones are 400`, async () => {
    const renter = await registerAndLogin(auth.app, { roles: ['renter'] });
    const sid = decodeJwt(renter.tokens.access_token).sid as string;
    const many = Array.from({ length: 1000 }, (_, i) =>
      i % 3 === 0
        ? { user_id: renter.user.id, sign_in_id: sid }
        : i % 3 === 1
          ? { user_id: randomUUID(), key_id: randomUUID() }
          : { user_id: renter.user.id },
    );

    // Every query the route makes, counted (a service client's own token costs none).
    let queries = 0;
    const counting: KyselyPlugin = {
      transformQuery: (args) => {
        queries += 1;
        return args.node;
      },
      transformResult: async (args) => args.result,
    };
    const counted = await buildApp({ ...auth.ctx, db: auth.db.withPlugin(counting) });
    try {
      const res = await ask(service, { credentials: many }, counted);
      expect(res.statusCode, res.body).toBe(200);
      expect(queries).toBe(1);
      const { live, reasons } = res.json() as { live: boolean[]; reasons: (string | null)[] };
      expect(live).toEqual(many.map((_, i) => i % 3 !== 1));
      expect(reasons).toEqual(many.map((_, i) => (i % 3 === 1 ? 'user_gone' : null)));
    } finally {
      await counted.close();
    }

    const refused = async (payload: unknown, path: string) => {
      const res = await ask(service, payload);
      expect(res.statusCode, res.body).toBe(400);
      expect(res.headers['content-type']).toContain('application/problem+json');
      expect(res.json()).toMatchObject({
        status: 400,
        errors: expect.arrayContaining([expect.objectContaining({ path })]),
      });
    };
    await refused({ credentials: [...many, { user_id: renter.user.id }] }, 'body.credentials');
    await refused({ credentials: [] }, 'body.credentials');
    await refused({}, 'body.credentials');
    await refused({ credentials: [{ user_id: 'not-a-uuid' }] }, 'body.credentials.0.user_id');
    await refused({ credentials: [{ key_id: randomUUID() }] }, 'body.credentials.0.user_id');
    await refused(
      {
        credentials: [{ user_id: renter.user.id }, { user_id: renter.user.id, key_id: randomUUID(), sign_in_id: sid }],
      },
      'body.credentials.1.sign_in_id',
    );
    const notJson = await auth.app.inject({
      method: 'POST',
      url: `${API}/credentials/live`,
      headers: { ...service, 'content-type': 'application/json' },
      payload: '{"credentials": [',
    });
    expect(notJson.statusCode).toBe(400);
  });

  it('answers platform services and admins; a renter (or their API key) is 403, no token 401', async () => {
    const renter = await registerAndLogin(auth.app, { roles: ['renter'] });
    const credentials = [{ user_id: renter.user.id }];
    expect((await answer(credentials, service)).live).toEqual([true]);
    expect((await answer(credentials, admin)).live).toEqual([true]);

    const key = await newKey(renter.tokens.access_token);
    for (const token of [renter.tokens.access_token, key.token]) {
      const res = await ask(bearer(token), { credentials });
      expect(res.statusCode, res.body).toBe(403);
      expect(res.json()).toMatchObject({ code: expect.stringMatching(/^(ROLE_REQUIRED|INSUFFICIENT_SCOPE)$/) });
    }
    expect((await ask(bearer(renter.tokens.access_token), { credentials })).json().code).toBe('ROLE_REQUIRED');
    const anonymous = await ask({}, { credentials });
    expect(anonymous.statusCode).toBe(401);
    expect(anonymous.headers['www-authenticate']).toMatch(/^Bearer/);
  });
});
