/**
 * Accounts that recover, against a real SMTP server (the mail catcher `pnpm start` runs): registration mails a
 * verification code that verifies the address once; a reset code mailed to a known address sets a new password once
 * and signs out every device, while an unknown address gets the same answer and no mail; codes are single-use,
 * short-lived and stored only as hashes; requests are rate-limited.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type MailCatcher, startMailCatcher } from '../../../scripts/lib/mail-catcher.ts';
import {
  bearer,
  decodeJwt,
  freshDatabase,
  GOOD_PASSWORD,
  registerAndLogin,
  startAuth,
  type TestAuth,
  testConfig,
  uniqueEmail,
} from './helpers.ts';
import { mailbox, RESET, VERIFY } from './mailbox.ts';

const dir = mkdtempSync(path.join(tmpdir(), 'auth-mail-'));
let catcher: MailCatcher;
let database: Awaited<ReturnType<typeof freshDatabase>>;
let auth: TestAuth;

beforeAll(async () => {
  catcher = await startMailCatcher({ dir });
  database = await freshDatabase();
  auth = await startAuth(database.db, testConfig({ mail: { smtp_url: catcher.url } }));
});
afterAll(async () => {
  await auth?.close();
  await database?.close();
  await catcher?.close();
  rmSync(dir, { recursive: true, force: true });
});

const { mailTo, mailed, codeFrom } = mailbox(dir);

const post = (url: string, payload: unknown, headers: Record<string, string> = {}, remoteAddress?: string) =>
  auth.app.inject({ method: 'POST', url: `/api/v1/auth${url}`, payload: payload as object, headers, remoteAddress });

describe('e-mail verification', () => {
  it('mails a code at registration that verifies the address once; tokens say so from then on', async () => {
    const { email, tokens, user } = await registerAndLogin(auth.app);
    expect(user).toMatchObject({ email_verified: false });
    expect(decodeJwt(tokens.access_token).email_verified).toBeUndefined();
    const code = await codeFrom(email, VERIFY);
    // Only its hash is kept.
    const stored = await auth.db
      .selectFrom('email_tokens')
      .select('token_hash')
      .where('user_id', '=', user.id)
      .execute();
    expect(stored.map((t) => t.token_hash)).not.toContain(code);
    // Verified with the account's own sign-in: nothing else changes (pre-hijacking.test.ts: without it).
    const verified = await post('/email/verify', { token: code }, bearer(tokens.access_token));
    expect(verified.statusCode, verified.body).toBe(200);
    expect(verified.json()).toMatchObject({ id: user.id, email_verified: true });
    const again = await post('/email/verify', { token: code });
    expect(again.statusCode).toBe(400);
    expect(again.json().code).toBe('INVALID_EMAIL_TOKEN');
    // A refresh reads the account again: the new token carries the claim; /me shows it.
    const refreshed = (await post('/refresh', { refresh_token: tokens.refresh_token })).json();
    expect(decodeJwt(refreshed.access_token).email_verified).toBe(true);
    const me = await auth.app.inject({ url: '/api/v1/auth/me', headers: bearer(refreshed.access_token) });
    expect(me.json().email_verified).toBe(true);
    // A verified user asking again is told so.
    expect((await post('/email/verification', {}, bearer(refreshed.access_token))).json().code).toBe(
      'EMAIL_ALREADY_VERIFIED',
    );
  });

  it('mails a new code on request, the latest ending the others once used', async () => {
    const { email, tokens } = await registerAndLogin(auth.app);
    const first = await codeFrom(email, VERIFY);
    const asked = await post('/email/verification', {}, bearer(tokens.access_token));
    expect(asked.statusCode, asked.body).toBe(202);
    const second = await codeFrom(email, VERIFY, 2);
    expect(second).not.toBe(first);
    expect((await post('/email/verify', { token: second }, bearer(tokens.access_token))).statusCode).toBe(200);
    expect((await post('/email/verify', { token: first })).json().code).toBe('INVALID_EMAIL_TOKEN');
  });

  it('refuses codes it never made, and requests without a sign-in', async () => {
    expect((await post('/email/verify', { token: 'made-up' })).json().code).toBe('INVALID_EMAIL_TOKEN');
    expect((await post('/email/verify', {})).statusCode).toBe(400);
    expect((await post('/email/verification', {})).statusCode).toBe(401);
  });
});

describe('password reset', () => {
  it('answers a known and an unknown address alike, and mails only the known one', async () => {
    const { email } = await registerAndLogin(auth.app);
    const stranger = uniqueEmail('nobody');
    const known = await post('/password/forgot', { email: email.toUpperCase() });
    const unknown = await post('/password/forgot', { email: stranger });
    expect(known.statusCode).toBe(202);
    expect(unknown.statusCode).toBe(202);
    expect(unknown.body).toBe(known.body);
    await codeFrom(email, RESET);
    await auth.ctx.mailer.idle();
    expect(await mailTo(stranger)).toEqual([]);
  });

  it('sets a new password once with the code: every device signed out, the address verified, a notice sent', async () => {
    const { email, tokens } = await registerAndLogin(auth.app);
    const other = (await post('/login', { email, password: GOOD_PASSWORD })).json();
    // A key made before the reset (by whoever held the account) dies with it.
    const key = (await post('/keys', { name: 'before-reset', scopes: ['offers'] }, bearer(tokens.access_token))).json()
      .api_key as string;
    await post('/password/forgot', { email });
    const code = await codeFrom(email, RESET);
    // A weak password is refused and leaves the code working.
    const weak = await post('/password/reset', { token: code, new_password: 'password' });
    expect(weak.statusCode).toBe(400);
    expect(weak.json().code).toMatch(/^PASSWORD_/);
    const next = 'a new and much longer passphrase';
    const reset = await post('/password/reset', { token: code, new_password: next });
    expect(reset.statusCode, reset.body).toBe(204);
    expect((await post('/password/reset', { token: code, new_password: next })).json().code).toBe(
      'INVALID_EMAIL_TOKEN',
    );
    for (const device of [tokens, other]) {
      expect((await post('/refresh', { refresh_token: device.refresh_token })).json().code).toBe(
        'REFRESH_TOKEN_REVOKED',
      );
    }
    expect((await post('/login', { email, password: GOOD_PASSWORD })).statusCode).toBe(401);
    const exchanged = await auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/token',
      payload: { grant_type: 'api_key', api_key: key },
    });
    expect(exchanged.statusCode).toBe(401);
    const login = await post('/login', { email, password: next });
    expect(login.statusCode).toBe(200);
    expect(decodeJwt(login.json().access_token).email_verified).toBe(true);
    expect((await mailed(email, 'Your password was changed')).text).toMatch(/every other device was signed out/);
  });

  it('lets exactly one of two resets with the same code through', async () => {
    const { email } = await registerAndLogin(auth.app);
    await post('/password/forgot', { email });
    const code = await codeFrom(email, RESET);
    const answers = await Promise.all(
      ['first passphrase of two', 'second passphrase of two'].map((p) =>
        post('/password/reset', { token: code, new_password: p }),
      ),
    );
    expect(answers.map((a) => a.statusCode).sort()).toEqual([204, 400]);
  });

  it('refuses an expired code', async () => {
    const db = await freshDatabase();
    const shortLived = await startAuth(
      db.db,
      testConfig({ mail: { smtp_url: catcher.url }, recovery: { reset_token_ttl: '200ms' } }),
    );
    try {
      const { email } = await registerAndLogin(shortLived.app);
      await shortLived.app.inject({ method: 'POST', url: '/api/v1/auth/password/forgot', payload: { email } });
      const code = await codeFrom(email, RESET);
      await new Promise((r) => setTimeout(r, 300));
      const late = await shortLived.app.inject({
        method: 'POST',
        url: '/api/v1/auth/password/reset',
        payload: { token: code, new_password: 'too late a passphrase' },
      });
      expect(late.json().code).toBe('INVALID_EMAIL_TOKEN');
    } finally {
      await shortLived.close();
      await db.close();
    }
  });
});

describe('limits and a platform without mail', () => {
  it('limits reset requests per address (429) and mails per account (silently, alike for any address)', async () => {
    const db = await freshDatabase();
    const limited = await startAuth(
      db.db,
      testConfig({
        mail: { smtp_url: catcher.url },
        rate_limit: { enabled: true, reset_per_ip: '4/1h', reset_per_account: '2/1h' },
        recovery: { verify_on_register: false },
      }),
    );
    try {
      const { email } = await registerAndLogin(limited.app, { ip: '203.0.113.50' });
      const forgot = () =>
        limited.app.inject({
          method: 'POST',
          url: '/api/v1/auth/password/forgot',
          payload: { email },
          remoteAddress: '203.0.113.7',
        });
      const answers = [];
      for (let i = 0; i < 5; i++) answers.push((await forgot()).statusCode);
      expect(answers).toEqual([202, 202, 202, 202, 429]);
      await limited.ctx.mailer.idle();
      expect((await mailTo(email)).filter((m) => m.subject === RESET)).toHaveLength(2);
    } finally {
      await limited.close();
      await db.close();
    }
  });

  it('says 503 MAIL_UNAVAILABLE where no SMTP server is set, and registers without mailing', async () => {
    const db = await freshDatabase();
    const mailless = await startAuth(db.db, testConfig());
    try {
      const { email, tokens } = await registerAndLogin(mailless.app);
      const forgot = await mailless.app.inject({
        method: 'POST',
        url: '/api/v1/auth/password/forgot',
        payload: { email },
      });
      expect(forgot.statusCode).toBe(503);
      expect(forgot.json().code).toBe('MAIL_UNAVAILABLE');
      const asked = await mailless.app.inject({
        method: 'POST',
        url: '/api/v1/auth/email/verification',
        headers: bearer(tokens.access_token),
      });
      expect(asked.json().code).toBe('MAIL_UNAVAILABLE');
    } finally {
      await mailless.close();
      await db.close();
    }
  });
});
