import { beforeAll, describe, expect, it } from 'vitest';
import { ensureInitialAdmin } from '../src/domain/accounts/index.ts';
import { bearer, freshDatabase, registerAndLogin, startAuth, testConfig, uniqueEmail, useAuth } from './helpers.ts';

const ADMIN = { email: 'Root@Example.com', password: 'initial admin passphrase' };

const auth = useAuth(testConfig({ admin: ADMIN }));
let adminToken: string;
let adminId: string;

beforeAll(async () => {
  expect(await ensureInitialAdmin(auth.ctx)).toBe('created');
  const res = await auth.app.inject({ method: 'POST', url: '/api/v1/auth/login', payload: ADMIN });
  adminToken = res.json().access_token;
  adminId = (await auth.app.inject({ method: 'GET', url: '/api/v1/auth/me', headers: bearer(adminToken) })).json().id;
});

const setRoles = (id: string, roles: unknown, token?: string) =>
  auth.app.inject({
    method: 'PUT',
    url: `/api/v1/auth/users/${id}/roles`,
    payload: { roles } as Record<string, unknown>,
    headers: token ? bearer(token) : {},
  });

describe('initial admin', () => {
  it('is created from configuration with the admin role and a normalised email', async () => {
    const me = await auth.app.inject({ method: 'GET', url: '/api/v1/auth/me', headers: bearer(adminToken) });
    expect(me.json()).toMatchObject({ email: 'root@example.com', roles: ['admin'] });
  });

  it('is not created again when an admin exists, even by several instances at once', async () => {
    const outcomes = await Promise.all([ensureInitialAdmin(auth.ctx), ensureInitialAdmin(auth.ctx)]);
    expect(outcomes).toEqual(['exists', 'exists']);
    const other = await startAuth(
      auth.db,
      testConfig({ admin: { email: uniqueEmail('admin2'), password: ADMIN.password } }),
    );
    try {
      expect(await ensureInitialAdmin(other.ctx)).toBe('exists');
    } finally {
      await other.close();
    }
  });

  it('refuses to promote an existing non-admin account named by ADMIN_EMAIL', async () => {
    const fresh = await freshDatabase();
    try {
      const first = await startAuth(fresh.db);
      const { email } = await registerAndLogin(first.app);
      await first.close();
      const other = await startAuth(fresh.db, testConfig({ admin: { email, password: ADMIN.password } }));
      await expect(ensureInitialAdmin(other.ctx)).rejects.toThrow(/never promoted/);
      await other.close();
    } finally {
      await fresh.close();
    }
  });
});

describe('PUT /api/v1/auth/users/{id}/roles', () => {
  it('lets an admin replace roles; the next refresh carries them', async () => {
    const { user, tokens } = await registerAndLogin(auth.app);
    const res = await setRoles(user.id, ['provider', 'renter'], adminToken);
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ id: user.id, roles: ['provider', 'renter'] });
    const refreshed = await auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/refresh',
      payload: { refresh_token: tokens.refresh_token },
    });
    const claims = JSON.parse(Buffer.from(refreshed.json().access_token.split('.')[1], 'base64url').toString());
    expect(claims.roles).toEqual(['provider', 'renter']);
    expect(auth.logs.lines().some((l) => l.msg === 'user roles changed' && l.actor_id === adminId)).toBe(true);
  });

  it('refuses non-admins (403) and anonymous callers (401)', async () => {
    const { user, tokens } = await registerAndLogin(auth.app);
    const self = await setRoles(user.id, ['admin'], tokens.access_token);
    expect(self.statusCode).toBe(403);
    expect(self.json().code).toBe('ROLE_REQUIRED');
    const anonymous = await setRoles(user.id, ['admin']);
    expect(anonymous.statusCode).toBe(401);
    expect(anonymous.headers['www-authenticate']).toBe('Bearer');
  });

  it('answers an unknown user with 404 and bad input with 400', async () => {
    const missing = await setRoles('00000000-0000-4000-8000-000000000000', ['renter'], adminToken);
    expect(missing.statusCode).toBe(404);
    expect(missing.json().code).toBe('USER_NOT_FOUND');
    expect((await setRoles('not-a-uuid', ['renter'], adminToken)).statusCode).toBe(400);
    expect((await setRoles(adminId, [], adminToken)).statusCode).toBe(400);
    expect((await setRoles(adminId, ['root'], adminToken)).statusCode).toBe(400);
  });

  it('keeps the last admin an admin (409), and allows it once there is another', async () => {
    const last = await setRoles(adminId, ['renter'], adminToken);
    expect(last.statusCode).toBe(409);
    expect(last.json().code).toBe('LAST_ADMIN');
    const { user } = await registerAndLogin(auth.app);
    expect((await setRoles(user.id, ['admin', 'renter'], adminToken)).statusCode).toBe(200);
    const demoted = await setRoles(adminId, ['renter'], adminToken);
    expect(demoted.statusCode).toBe(200);
    expect(demoted.json().roles).toEqual(['renter']);
  });
});
