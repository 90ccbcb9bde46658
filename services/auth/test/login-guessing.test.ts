/**
 * Password guessing is limited without handing strangers a switch for someone else's account (domain/login-limits.ts):
 * wrong passwords from one source throttle that source alone (429 with Retry-After), the owner logs in from elsewhere;
 * guessing from many sources reaches a much higher ceiling per account that stops new sources only, while the owner's
 * trusted device, sign-in and reset link keep working. Against PostgreSQL and a real SMTP server (the mail catcher).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type MailCatcher, startMailCatcher } from '../../../scripts/lib/mail-catcher.ts';
import { sourceOf } from '../src/domain/login-limits.ts';
import {
  bearer,
  freshDatabase,
  GOOD_PASSWORD,
  registerAndLogin,
  startAuth,
  type TestAuth,
  testConfig,
  uniqueEmail,
} from './helpers.ts';
import { mailbox, RESET } from './mailbox.ts';

const dir = mkdtempSync(path.join(tmpdir(), 'auth-guessing-'));
let catcher: MailCatcher;
let database: Awaited<ReturnType<typeof freshDatabase>>;
let auth: TestAuth;
/** The same service with the shipped limits. */
let shipped: TestAuth;

beforeAll(async () => {
  catcher = await startMailCatcher({ dir });
  database = await freshDatabase();
  auth = await startAuth(
    database.db,
    testConfig({
      server: { trusted_proxies: ['127.0.0.1'] },
      mail: { smtp_url: catcher.url },
      recovery: { verify_on_register: false },
      rate_limit: {
        enabled: true,
        login_per_ip: '100/1m',
        login_per_account_ip: '3/15m',
        login_per_account: '8/15m',
        login_per_device: '3/15m',
      },
    }),
  );
  shipped = await startAuth(
    database.db,
    testConfig({ server: { trusted_proxies: ['127.0.0.1'] }, rate_limit: { enabled: true } }),
  );
});
afterAll(async () => {
  await shipped?.close();
  await auth?.close();
  await database?.close();
  await catcher?.close();
  rmSync(dir, { recursive: true, force: true });
});

const { codeFrom } = mailbox(dir);

/** A request through the trusted proxy from the given client address. */
const from = (ip: string) => ({ remoteAddress: '127.0.0.1', headers: { 'x-forwarded-for': ip } });

const login = (email: string, password: string, ip: string, deviceToken?: string, app = auth.app) =>
  app.inject({
    method: 'POST',
    url: '/api/v1/auth/login',
    payload: { email, password, ...(deviceToken ? { device_token: deviceToken } : {}) },
    ...from(ip),
  });

const WRONG = 'not the password at all';

/** The answer's status, with the code and Retry-After of a 429. */
const answer = (res: { statusCode: number; headers: Record<string, unknown>; json(): { code?: string } }) =>
  res.statusCode === 429
    ? { status: 429, code: res.json().code, retryAfterMinutes: Math.ceil(Number(res.headers['retry-after']) / 60) }
    : { status: res.statusCode };

const THROTTLED = { status: 429, code: 'RATE_LIMITED', retryAfterMinutes: 15 };

describe('a stranger guessing an account’s password', () => {
  it('with the shipped limits: ten wrong passwords from their address leave the owner’s login from another alone', async () => {
    const { email } = await registerAndLogin(shipped.app, { ip: '198.51.100.5' });
    for (let i = 0; i < 10; i++) {
      expect(answer(await login(email, WRONG, '203.0.113.65', undefined, shipped.app))).toEqual({ status: 401 });
    }
    expect(answer(await login(email, GOOD_PASSWORD, '203.0.113.65', undefined, shipped.app))).toEqual(THROTTLED);
    expect(answer(await login(email, GOOD_PASSWORD, '198.51.100.6', undefined, shipped.app))).toEqual({ status: 200 });
  });

  it('throttles their source, while the owner logs in from another', async () => {
    const { email } = await registerAndLogin(auth.app, { ip: '198.51.100.10' });
    const stranger = '203.0.113.66';
    for (let i = 0; i < 3; i++) expect(answer(await login(email, WRONG, stranger))).toEqual({ status: 401 });
    // The stranger is stopped for the window, even with the right password.
    expect(answer(await login(email, WRONG, stranger))).toEqual(THROTTLED);
    expect(answer(await login(email, GOOD_PASSWORD, stranger))).toEqual(THROTTLED);
    // The owner, on a device that never logged in before, from their own address: in.
    expect(answer(await login(email, GOOD_PASSWORD, '198.51.100.11'))).toEqual({ status: 200 });
    // An address without an account is answered exactly alike.
    const nobody = uniqueEmail('nobody');
    for (let i = 0; i < 3; i++) expect(answer(await login(nobody, WRONG, stranger))).toEqual({ status: 401 });
    expect(answer(await login(nobody, WRONG, stranger))).toEqual(THROTTLED);
  });

  it('counts an IPv6 /64 as one source', async () => {
    const { email } = await registerAndLogin(auth.app, { ip: '198.51.100.12' });
    for (const ip of ['2001:db8:66:1::1', '2001:db8:66:1::2', '2001:db8:66:1:ffff:ffff:ffff:ffff']) {
      expect(answer(await login(email, WRONG, ip))).toEqual({ status: 401 });
    }
    expect(answer(await login(email, WRONG, '2001:db8:66:1::abcd'))).toEqual(THROTTLED);
    expect(answer(await login(email, GOOD_PASSWORD, '2001:db8:66:2::1'))).toEqual({ status: 200 });
    expect(sourceOf('2001:DB8:66:1:0:0:0:1')).toBe('2001:db8:66:1::/64');
    expect(sourceOf('::ffff:192.0.2.7')).toBe('192.0.2.7');
    expect(sourceOf('::1')).toBe('0:0:0:0::/64');
  });
});

describe('guessing from many sources', () => {
  it("stops new sources at the account's ceiling; the owner's trusted device, sign-in and reset link still work", async () => {
    const { email } = await registerAndLogin(auth.app, { ip: '198.51.100.20' });
    const home = await login(email, GOOD_PASSWORD, '198.51.100.21');
    const { device_token: deviceToken, access_token: signedIn } = home.json();
    // Four sources, two wrong passwords each: none reaches its own limit (3), together they reach the ceiling (8).
    for (let source = 1; source <= 4; source++) {
      for (let i = 0; i < 2; i++) {
        expect(answer(await login(email, WRONG, `192.0.2.${source}`))).toEqual({ status: 401 });
      }
    }
    expect(answer(await login(email, GOOD_PASSWORD, '192.0.2.99'))).toEqual(THROTTLED);
    // The owner's trusted device logs in as usual, from wherever it is now.
    expect(answer(await login(email, GOOD_PASSWORD, '198.51.100.22', deviceToken))).toEqual({ status: 200 });
    // Their sign-in changes the password: only that sign-in's own wrong tries would count against it.
    const changed = await auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/password',
      headers: bearer(signedIn),
      payload: { current_password: GOOD_PASSWORD, new_password: 'a second passphrase of the owner' },
    });
    expect(changed.statusCode, changed.body).toBe(204);
    // A reset link, asked and used from a new device: the account starts afresh, and its guesses with it.
    const forgot = await auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/password/forgot',
      payload: { email },
      ...from('198.51.100.23'),
    });
    expect(forgot.statusCode).toBe(202);
    const reset = await auth.app.inject({
      method: 'POST',
      url: '/api/v1/auth/password/reset',
      payload: { token: await codeFrom(email, RESET), new_password: 'the owner reset it to this' },
      ...from('198.51.100.23'),
    });
    expect(reset.statusCode, reset.body).toBe(204);
    expect(answer(await login(email, 'the owner reset it to this', '198.51.100.23'))).toEqual({ status: 200 });
  });

  it("holds a trusted device to its own limit, and a sign-in's wrong current passwords to the sign-in's", async () => {
    const { email, tokens } = await registerAndLogin(auth.app, { ip: '198.51.100.30' });
    const deviceToken = (await login(email, GOOD_PASSWORD, '198.51.100.31')).json().device_token as string;
    for (let i = 0; i < 3; i++) {
      expect(answer(await login(email, WRONG, '198.51.100.31', deviceToken))).toEqual({ status: 401 });
    }
    expect(answer(await login(email, GOOD_PASSWORD, '198.51.100.31', deviceToken))).toEqual(THROTTLED);
    const change = () =>
      auth.app.inject({
        method: 'POST',
        url: '/api/v1/auth/password',
        headers: bearer(tokens.access_token),
        payload: { current_password: WRONG, new_password: 'a second passphrase of the owner' },
      });
    for (let i = 0; i < 3; i++) expect(answer(await change())).toEqual({ status: 401 });
    expect(answer(await change())).toEqual(THROTTLED);
    // Neither stops the owner logging in elsewhere.
    expect(answer(await login(email, GOOD_PASSWORD, '198.51.100.32'))).toEqual({ status: 200 });
  });
});
