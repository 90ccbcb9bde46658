/**
 * Media types: every route takes JSON; only the OAuth token endpoint (`POST /token`, RFC 6749 §4.4.2) also takes a
 * form-encoded body. A form body anywhere else is a 415 problem, before anything is done with it (a form-encoded
 * registration registers nobody).
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { ensureInitialAdmin } from '../src/domain/accounts/index.ts';
import { bearer, GOOD_PASSWORD, testConfig, uniqueEmail, useAuth } from './helpers.ts';

const ADMIN = { email: 'media-admin@example.com', password: 'initial admin passphrase' };
const auth = useAuth(testConfig({ admin: ADMIN }));

const FORM = 'application/x-www-form-urlencoded';

beforeAll(async () => {
  await ensureInitialAdmin(auth.ctx);
  // A renter too, so that every route with a body (API keys are a renter's or provider's) lets it in to be refused.
  await auth.db
    .updateTable('users')
    .set({ roles: ['admin', 'renter'] })
    .where('email', '=', ADMIN.email)
    .execute();
});

async function adminToken(): Promise<string> {
  const res = await auth.app.inject({ method: 'POST', url: '/api/v1/auth/login', payload: ADMIN });
  return res.json().access_token;
}

describe('form-encoded bodies', () => {
  it('are refused with 415 on every route with a body but the token endpoint', async () => {
    const token = await adminToken();
    const routes = auth.app.routeTable.filter(
      (r) => ['POST', 'PUT', 'PATCH'].includes(r.method) && r.url !== '/api/v1/auth/token',
    );
    expect(routes.length).toBeGreaterThan(5);
    for (const route of routes) {
      const url = route.url.replace(/:[A-Za-z]+/g, crypto.randomUUID());
      const res = await auth.app.inject({
        method: route.method as 'POST',
        url,
        headers: { ...bearer(token), 'content-type': FORM },
        payload: new URLSearchParams({ email: uniqueEmail(), password: GOOD_PASSWORD, name: 'x' }).toString(),
      });
      expect(res.statusCode, `${route.method} ${route.url}`).toBe(415);
      expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
      expect(res.json()).toMatchObject({ status: 415, code: 'UNSUPPORTED_MEDIA_TYPE' });
    }
  });

  it('register nobody', async () => {
    const email = uniqueEmail();
    const reg = await auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/register',
      headers: { 'content-type': FORM },
      payload: new URLSearchParams({ email, password: GOOD_PASSWORD }).toString(),
    });
    expect(reg.statusCode).toBe(415);
    const login = await auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/login',
      payload: { email, password: GOOD_PASSWORD },
    });
    expect(login.statusCode).toBe(401);
  });

  it('are what the token endpoint takes (RFC 6749 §4.4.2)', async () => {
    const token = await adminToken();
    const created = await auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/clients',
      headers: bearer(token),
      payload: { name: `media-${Date.now()}`, role: 'service' },
    });
    expect(created.statusCode).toBe(201);
    const { client_id, client_secret } = created.json();
    const res = await auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/token',
      headers: { 'content-type': FORM },
      payload: new URLSearchParams({ grant_type: 'client_credentials', client_id, client_secret }).toString(),
    });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ token_type: 'bearer' });
  });
});
