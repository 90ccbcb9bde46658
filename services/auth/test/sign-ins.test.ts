/**
 * A user's signed-in devices: listed with their own marked, each signed out at once (its refresh refused), all the
 * others at once; a password change signs out every other device and takes the current password. Only the user's
 * own sign-in does this.
 */
import { describe, expect, it } from 'vitest';
import { bearer, decodeJwt, GOOD_PASSWORD, registerAndLogin, testConfig, useAuth } from './helpers.ts';

const auth = useAuth(testConfig());

/** Logs the user in again from a device of its own (its User-Agent). */
async function loginFrom(email: string, device: string, password = GOOD_PASSWORD) {
  const res = await auth.app.inject({
    method: 'POST',
    url: '/api/v1/auth/login',
    headers: { 'user-agent': device },
    payload: { email, password },
  });
  expect(res.statusCode, res.body).toBe(200);
  return res.json() as { access_token: string; refresh_token: string };
}

const refresh = (token: string) =>
  auth.app.inject({ method: 'POST', url: '/api/v1/auth/refresh', payload: { refresh_token: token } });

const signIns = async (token: string) =>
  (await auth.app.inject({ url: '/api/v1/auth/sign-ins', headers: bearer(token) })).json() as Array<{
    id: string;
    current: boolean;
    user_agent: string | null;
  }>;

describe('signed-in devices', () => {
  it('lists each device with its own marked, and signs one out at once', async () => {
    const { email } = await registerAndLogin(auth.app);
    const laptop = await loginFrom(email, 'laptop/1.0');
    const phone = await loginFrom(email, 'phone/2.0');
    const listed = await signIns(laptop.access_token);
    // The registration helper's login, the laptop and the phone.
    expect(listed).toHaveLength(3);
    expect(listed.filter((s) => s.current).map((s) => s.user_agent)).toEqual(['laptop/1.0']);
    const phoneId = decodeJwt(phone.access_token).sid as string;
    expect(listed.map((s) => s.id)).toContain(phoneId);
    const out = await auth.app.inject({
      method: 'DELETE',
      url: `/api/v1/auth/sign-ins/${phoneId}`,
      headers: bearer(laptop.access_token),
    });
    expect(out.statusCode).toBe(204);
    expect((await refresh(phone.refresh_token)).json().code).toBe('REFRESH_TOKEN_REVOKED');
    // The access token the phone still holds is refused here at once (other services take it until it expires).
    const stale = await auth.app.inject({ url: '/api/v1/auth/sign-ins', headers: bearer(phone.access_token) });
    expect({ status: stale.statusCode, code: stale.json().code }).toEqual({ status: 401, code: 'SIGN_IN_ENDED' });
    expect(stale.headers['www-authenticate']).toBe('Bearer');
    expect((await refresh(laptop.refresh_token)).statusCode).toBe(200);
    expect((await signIns(laptop.access_token)).map((s) => s.id)).not.toContain(phoneId);
  });

  it('signs out every other device, or all of them', async () => {
    const { email } = await registerAndLogin(auth.app);
    const a = await loginFrom(email, 'a');
    const b = await loginFrom(email, 'b');
    const others = await auth.app.inject({
      method: 'DELETE',
      url: '/api/v1/auth/sign-ins',
      headers: bearer(a.access_token),
    });
    expect(others.json()).toEqual({ signed_out: 2 });
    expect((await refresh(b.refresh_token)).statusCode).toBe(401);
    const kept = await refresh(a.refresh_token);
    expect(kept.statusCode).toBe(200);
    const all = await auth.app.inject({
      method: 'DELETE',
      url: '/api/v1/auth/sign-ins?include_current=true',
      headers: bearer(kept.json().access_token),
    });
    expect(all.json()).toEqual({ signed_out: 1 });
    expect((await refresh(kept.json().refresh_token)).statusCode).toBe(401);
  });

  it("answers another user's sign-in 404", async () => {
    const mine = await registerAndLogin(auth.app);
    const theirs = await registerAndLogin(auth.app);
    const res = await auth.app.inject({
      method: 'DELETE',
      url: `/api/v1/auth/sign-ins/${decodeJwt(theirs.tokens.access_token).sid}`,
      headers: bearer(mine.tokens.access_token),
    });
    expect(res.statusCode).toBe(404);
    expect((await refresh(theirs.tokens.refresh_token)).statusCode).toBe(200);
  });
});

describe('changing the password', () => {
  it('takes the current password, and signs out every other device but keeps this one', async () => {
    const { email } = await registerAndLogin(auth.app);
    const here = await loginFrom(email, 'here');
    const elsewhere = await loginFrom(email, 'elsewhere');
    const change = (current: string, next: string) =>
      auth.app.inject({
        method: 'POST',
        url: '/api/v1/auth/password',
        headers: bearer(here.access_token),
        payload: { current_password: current, new_password: next },
      });
    const wrong = await change('not my password', 'a brand new passphrase');
    expect(wrong.statusCode).toBe(401);
    expect(wrong.json().code).toBe('INVALID_CREDENTIALS');
    expect((await change(GOOD_PASSWORD, 'short')).statusCode).toBe(400);
    expect((await refresh(elsewhere.refresh_token)).statusCode).toBe(200);
    const elsewhereAgain = await loginFrom(email, 'elsewhere');
    expect((await change(GOOD_PASSWORD, 'a brand new passphrase')).statusCode).toBe(204);
    expect((await refresh(elsewhereAgain.refresh_token)).json().code).toBe('REFRESH_TOKEN_REVOKED');
    expect((await refresh(here.refresh_token)).statusCode).toBe(200);
    const old = await auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/login',
      payload: { email, password: GOOD_PASSWORD },
    });
    expect(old.statusCode).toBe(401);
    await loginFrom(email, 'new', 'a brand new passphrase');
  });
});
