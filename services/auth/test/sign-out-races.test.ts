/**
 * Sign-outs that meet a refresh or a login under way (against real PostgreSQL, each interleaving made by holding a row
 * that the request under way needs, and let go once the other request waits too): the device signed out stays signed
 * out, whichever commits first, and a password changed while a login with the old one is checked refuses that login.
 */

import { lockWaiters } from '@gpu/common/testing';
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { bearer, GOOD_PASSWORD, registerAndLogin, testConfig, useAuth } from './helpers.ts';

// Rate limits on: a refresh counts its account's refreshes inside its transaction, before it holds the account.
const auth = useAuth(testConfig({ rate_limit: { enabled: true } }));

const refresh = (token: string) =>
  auth.app.inject({ method: 'POST', url: '/api/v1/auth/refresh', payload: { refresh_token: token } });

/** Holds the rows that `sql` selects while `during` runs: a request that needs one waits there. */
async function holding(rows: ReturnType<typeof sql>, during: () => Promise<void>): Promise<void> {
  await auth.db.transaction().execute(async (trx) => {
    const held = await rows.execute(trx);
    expect(held.rows.length).toBeGreaterThan(0);
    await during();
  });
}

/**
 * Holds the account's refresh tokens while `during` runs: a refresh of the account waits there, the account held
 * shared, its new token not written yet.
 */
const holdingTokens = (userId: string, during: () => Promise<void>) =>
  holding(sql`SELECT 1 FROM refresh_tokens WHERE user_id = ${userId} FOR UPDATE`, during);

/** Holds the account's refresh count (its rate-limit row) while `during` runs: a refresh waits there, before all else. */
const holdingCount = (userId: string, during: () => Promise<void>) =>
  holding(sql`SELECT 1 FROM rate_limits WHERE name = 'refresh-account' AND key = ${userId} FOR UPDATE`, during);

const signOutAll = (accessToken: string) =>
  auth.app.inject({
    method: 'DELETE',
    url: '/api/v1/auth/sign-ins?include_current=true',
    headers: bearer(accessToken),
  });

describe('a sign-out that meets a refresh under way', () => {
  for (const how of ['logout', 'sign-out', 'sign-out-all'] as const) {
    it(`keeps the device signed out (${how}): the token that refresh made is refused too`, async () => {
      const { tokens, user } = await registerAndLogin(auth.app);
      // A first refresh counts the account (its rate-limit row, held below).
      const current = (await refresh(tokens.refresh_token)).json();
      const signIns = (
        await auth.app.inject({ url: '/api/v1/auth/sign-ins', headers: bearer(current.access_token) })
      ).json() as Array<{ id: string; current: boolean }>;
      const family = signIns.find((s) => s.current)!.id;
      let refreshed: ReturnType<typeof refresh> | undefined;
      let signedOut: Promise<{ statusCode: number; body: string }> | undefined;
      await holdingTokens(user.id, async () => {
        refreshed = refresh(current.refresh_token);
        await lockWaiters(auth.db, 1);
        signedOut =
          how === 'logout'
            ? auth.app.inject({
                method: 'POST',
                url: '/api/v1/auth/logout',
                payload: { refresh_token: current.refresh_token },
              })
            : how === 'sign-out'
              ? auth.app.inject({
                  method: 'DELETE',
                  url: `/api/v1/auth/sign-ins/${family}`,
                  headers: bearer(current.access_token),
                })
              : signOutAll(current.access_token);
        // The sign-out waits for the refresh (the account it locks is held shared by it).
        await lockWaiters(auth.db, 2);
      });
      const made = await refreshed!;
      expect(made.statusCode, made.body).toBe(200);
      const out = await signedOut!;
      expect(out.statusCode, out.body).toBeLessThan(300);
      const again = await refresh(made.json().refresh_token);
      expect(again.statusCode, again.body).toBe(401);
      expect(again.json().code).toBe('REFRESH_TOKEN_REVOKED');
    });
  }
});

describe('a sign-out of every device that meets refreshes waiting for their count', () => {
  it('goes through at once: a refresh holds the account only once counted, then finds its token revoked', async () => {
    const { tokens, user } = await registerAndLogin(auth.app);
    // A first refresh counts the account (its rate-limit row, held below).
    const current = (await refresh(tokens.refresh_token)).json();
    let refreshed: ReturnType<typeof refresh> | undefined;
    await holdingCount(user.id, async () => {
      // Queued behind the count (as each of a stream of refreshes queues behind the one before), holding nothing of
      // the account: had it held the account shared, the sign-out would wait for it, and so for this hold.
      refreshed = refresh(current.refresh_token);
      await lockWaiters(auth.db, 1);
      const out = await signOutAll(current.access_token);
      expect(out.statusCode, out.body).toBeLessThan(300);
    });
    const made = await refreshed!;
    expect(made.statusCode, made.body).toBe(401);
    expect(made.json().code).toBe('REFRESH_TOKEN_REVOKED');
  });
});

describe('a password change that meets a login under way', () => {
  it('refuses the login with the old password that was checked before the change and written after it', async () => {
    const { user } = await registerAndLogin(auth.app);
    const newHash = await auth.ctx.hasher.hash('a brand new passphrase');
    let login: Promise<{ statusCode: number; body: string; json: () => { code: string } }> | undefined;
    // The change, by hand: the account locked, its new password written, not committed while the login checks the
    // old one (which it reads as committed: it matches) and then waits to write its sign-in.
    await auth.db.transaction().execute(async (trx) => {
      await sql`SELECT 1 FROM users WHERE id = ${user.id} FOR UPDATE`.execute(trx);
      await trx.updateTable('users').set({ password_hash: newHash }).where('id', '=', user.id).execute();
      login = auth.app.inject({
        method: 'POST',
        url: '/api/v1/auth/login',
        payload: { email: user.email, password: GOOD_PASSWORD },
      });
      await lockWaiters(auth.db, 1);
    });
    const res = await login!;
    expect(res.statusCode, res.body).toBe(401);
    expect(res.json().code).toBe('INVALID_CREDENTIALS');
  });
});
