/** Inputs found to answer 500 by probing the running service, each now a 4xx problem. */
import { SignJWT } from 'jose';
import { describe, expect, it } from 'vitest';
import { bearer, GOOD_PASSWORD, registerAndLogin, SECRET, testConfig, uniqueEmail, useAuth } from './helpers.ts';

const auth = useAuth(testConfig());

function signed(claims: Record<string, unknown>) {
  const now = Math.floor(Date.now() / 1000);
  return new SignJWT({
    iss: auth.config.jwt.issuer,
    aud: auth.config.jwt.audience,
    sub: crypto.randomUUID(),
    iat: now,
    exp: now + 300,
    jti: crypto.randomUUID(),
    roles: ['renter'],
    ...claims,
  })
    .setProtectedHeader({ alg: 'HS256' })
    .sign(new TextEncoder().encode(SECRET));
}

const me = (token: string) => auth.app.inject({ method: 'GET', url: '/api/v1/auth/me', headers: bearer(token) });

describe('input guards', () => {
  it('refuses unknown body fields with 400 naming them, and registers nothing', async () => {
    const email = uniqueEmail();
    // `role` for `roles`: ignoring it would register a renter where a provider was asked for.
    const reg = await auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/register',
      payload: { email, password: GOOD_PASSWORD, role: 'provider' },
    });
    expect(reg.statusCode).toBe(400);
    expect(reg.json()).toMatchObject({
      code: 'VALIDATION_ERROR',
      errors: [{ path: 'body.role', message: 'unknown field' }],
    });
    const login = await auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/login',
      payload: { email, password: GOOD_PASSWORD },
    });
    expect(login.statusCode).toBe(401);
  });

  it('refuses passwords with NUL or other control characters at registration and login with 400', async () => {
    for (const password of ['\u0000'.repeat(12), `${GOOD_PASSWORD}\u0000`, `tab\tseparated passphrase`]) {
      const reg = await auth.app.inject({
        method: 'POST',
        url: '/api/v1/auth/register',
        payload: { email: uniqueEmail(), password },
      });
      expect(reg.statusCode).toBe(400);
      expect(reg.json().errors[0].path).toBe('body.password');
      const login = await auth.app.inject({
        method: 'POST',
        url: '/api/v1/auth/login',
        payload: { email: uniqueEmail(), password },
      });
      expect(login.statusCode).toBe(400);
    }
  });

  it('answers 401 INVALID_TOKEN, not 500, to a validly signed token whose sub is not a user ID', async () => {
    for (const sub of ['not-a-uuid', '', "1'; DROP TABLE users; --"]) {
      const res = await me(await signed({ sub }));
      expect(res.statusCode).toBe(401);
      expect(res.json().code).toBe('INVALID_TOKEN');
    }
  });

  it('refuses a token issued in the future', async () => {
    const { user } = await registerAndLogin(auth.app);
    const now = Math.floor(Date.now() / 1000);
    const res = await me(await signed({ sub: user.id, iat: now + 3600, exp: now + 7200 }));
    expect(res.statusCode).toBe(401);
    expect(res.json().detail).toMatch(/future/);
    expect((await me(await signed({ sub: user.id }))).statusCode).toBe(200);
  });
});
