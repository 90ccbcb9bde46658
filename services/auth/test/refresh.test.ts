import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, freshDatabase, registerAndLogin, startAuth, type TestAuth, testConfig } from './helpers.ts';

let auth: TestAuth;
let noGrace: TestAuth;
let database: Awaited<ReturnType<typeof freshDatabase>>;

beforeAll(async () => {
  database = await freshDatabase();
  auth = await startAuth(database.db, testConfig({ jwt: { refresh_reuse_interval: '5s' } }));
  // The same database, with no reuse interval: any second use is reuse.
  noGrace = await startAuth(database.db, testConfig({ jwt: { refresh_reuse_interval: '0s' } }));
});

afterAll(async () => {
  await auth?.close();
  await noGrace?.close();
  await database?.close();
});

const refresh = (token: string, app = auth.app) =>
  app.inject({ method: 'POST', url: '/api/v1/auth/refresh', payload: { refresh_token: token } });
const logout = (token: string) =>
  auth.app.inject({ method: 'POST', url: '/api/v1/auth/logout', payload: { refresh_token: token } });

describe('POST /api/v1/auth/refresh', () => {
  it('rotates: returns a new access token and a new refresh token', async () => {
    const { user, tokens } = await registerAndLogin(auth.app);
    const res = await refresh(tokens.refresh_token);
    expect(res.statusCode).toBe(200);
    const next = res.json();
    expect(next.token_type).toBe('bearer');
    expect(next.refresh_token).not.toBe(tokens.refresh_token);
    expect(next.access_token).not.toBe(tokens.access_token);
    const meRes = await auth.app.inject({ method: 'GET', url: '/api/v1/auth/me', headers: bearer(next.access_token) });
    expect(meRes.json().id).toBe(user.id);
    expect((await refresh(next.refresh_token)).statusCode).toBe(200);
  });

  it('revokes the whole family when a rotated token is presented again', async () => {
    const { tokens } = await registerAndLogin(noGrace.app);
    const second = (await refresh(tokens.refresh_token, noGrace.app)).json();
    const third = (await refresh(second.refresh_token, noGrace.app)).json();
    const reuse = await refresh(tokens.refresh_token, noGrace.app);
    expect(reuse.statusCode).toBe(401);
    expect(reuse.json().code).toBe('REFRESH_TOKEN_REUSED');
    // The attacker's or the victim's newest token is dead too: the session is over.
    const newest = await refresh(third.refresh_token, noGrace.app);
    expect(newest.statusCode).toBe(401);
    expect(newest.json().code).toBe('REFRESH_TOKEN_REVOKED');
    expect(noGrace.logs.lines().some((l) => l.msg === 'refresh token reuse detected: token family revoked')).toBe(true);
  });

  it('does not touch other sessions of the same user on reuse', async () => {
    const { email, password, tokens } = await registerAndLogin(noGrace.app);
    const other = (
      await noGrace.app.inject({ method: 'POST', url: '/api/v1/auth/login', payload: { email, password } })
    ).json();
    await refresh(tokens.refresh_token, noGrace.app);
    expect((await refresh(tokens.refresh_token, noGrace.app)).statusCode).toBe(401);
    expect((await refresh(other.refresh_token, noGrace.app)).statusCode).toBe(200);
  });

  it('answers a repeat within the reuse interval (a concurrent client) without revoking', async () => {
    const { tokens } = await registerAndLogin(auth.app);
    const [a, b] = await Promise.all([refresh(tokens.refresh_token), refresh(tokens.refresh_token)]);
    expect(a.statusCode).toBe(200);
    expect(b.statusCode).toBe(200);
    expect(a.json().refresh_token).not.toBe(b.json().refresh_token);
    expect((await refresh(a.json().refresh_token)).statusCode).toBe(200);
    expect((await refresh(b.json().refresh_token)).statusCode).toBe(200);
  });

  it('rejects an unknown token and an expired one', async () => {
    const unknown = await refresh('x'.repeat(43));
    expect(unknown.statusCode).toBe(401);
    expect(unknown.headers['www-authenticate']).toBe('Bearer');
    expect(unknown.json().code).toBe('INVALID_REFRESH_TOKEN');
    const shortLived = await startAuth(database.db, testConfig({ jwt: { refresh_token_expire: '1s' } }));
    try {
      const { tokens } = await registerAndLogin(shortLived.app);
      await new Promise((r) => setTimeout(r, 1200));
      const res = await refresh(tokens.refresh_token, shortLived.app);
      expect(res.statusCode).toBe(401);
      expect(res.json().code).toBe('REFRESH_TOKEN_EXPIRED');
    } finally {
      await shortLived.close();
    }
  });

  it('validates the body', async () => {
    const res = await auth.app.inject({ method: 'POST', url: '/api/v1/auth/refresh', payload: { token: 'x' } });
    expect(res.statusCode).toBe(400);
    expect(res.json().errors[0].path).toBe('body.refresh_token');
  });
});

describe('POST /api/v1/auth/logout', () => {
  it("revokes the presented token's family, including tokens rotated from it", async () => {
    const { tokens } = await registerAndLogin(auth.app);
    const next = (await refresh(tokens.refresh_token)).json();
    const res = await logout(tokens.refresh_token);
    expect(res.statusCode).toBe(204);
    expect(res.body).toBe('');
    const after = await refresh(next.refresh_token);
    expect(after.statusCode).toBe(401);
    expect(after.json().code).toBe('REFRESH_TOKEN_REVOKED');
  });

  it('answers 204 for an unknown token too (it reveals nothing)', async () => {
    expect((await logout('y'.repeat(43))).statusCode).toBe(204);
  });
});
