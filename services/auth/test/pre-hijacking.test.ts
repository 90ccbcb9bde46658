/**
 * Account pre-hijacking (Sudhodanan and Paverd, "Pre-hijacked Accounts", USENIX Security 2022): an attacker registers
 * the victim's address before the victim does, signs in on two devices, makes an API key and a daemon client, asks for
 * another verification mail, and waits. When the victim proves the address theirs, with the mailed verification code
 * (without signing in) or with a password reset, the attacker keeps nothing: their password, sign-ins, refresh tokens,
 * trusted device, key, daemon and access tokens are all dead at this service, and the victim alone is signed in.
 * Against a real SMTP server (the mail catcher `pnpm start` runs) and PostgreSQL.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Principal } from '@gpu/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type MailCatcher, startMailCatcher } from '../../../scripts/lib/mail-catcher.ts';
import { findUserByEmail } from '../src/db/user-repository.ts';
import { createApiKey } from '../src/domain/api-keys.ts';
import { createClient } from '../src/domain/clients.ts';
import { issueTokenPair } from '../src/domain/token-pair.ts';
import { bearer, decodeJwt, freshDatabase, startAuth, type TestAuth, testConfig, uniqueEmail } from './helpers.ts';
import { mailbox, RESET, VERIFY } from './mailbox.ts';

const dir = mkdtempSync(path.join(tmpdir(), 'auth-prehijack-'));
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

const { mailed, codeFrom } = mailbox(dir);

const ATTACKER_PASSWORD = 'the attacker chose this passphrase';
const VICTIM_PASSWORD = 'the owner of the mailbox chose this one';

const call = (method: string, url: string, payload?: unknown, headers: Record<string, string> = {}) =>
  auth.app.inject({
    method: method as 'POST',
    url: `/api/v1/auth${url}`,
    headers,
    ...(payload === undefined ? {} : { payload: payload as object }),
  });
const post = (url: string, payload: unknown, headers: Record<string, string> = {}) =>
  call('POST', url, payload, headers);

/** Status and code of an answer. */
const outcome = (res: { statusCode: number; body: string }) => ({
  status: res.statusCode,
  code: res.body.startsWith('{') ? (JSON.parse(res.body).code as string | undefined) : undefined,
});

interface Pair {
  access_token: string;
  refresh_token: string;
  device_token: string;
}

/** The attacker registers the victim's address and sets up everything an account lets them. */
async function attackerSetsUp(email: string) {
  const registered = await post('/register', { email, password: ATTACKER_PASSWORD, roles: ['provider', 'renter'] });
  expect(registered.statusCode, registered.body).toBe(201);
  const login = async (): Promise<Pair> => {
    const res = await post('/login', { email, password: ATTACKER_PASSWORD });
    expect(res.statusCode, res.body).toBe(200);
    return res.json();
  };
  const laptop = await login();
  const phone = await login();
  const made = await post('/keys', { name: 'scraper', scopes: ['read', 'sessions'] }, bearer(laptop.access_token));
  expect(made.statusCode, made.body).toBe(201);
  const apiKey = made.json().api_key as string;
  const keyToken = (await post('/token', { grant_type: 'api_key', api_key: apiKey })).json().access_token as string;
  const daemon = await post('/clients', { name: 'rig-1', role: 'daemon' }, bearer(laptop.access_token));
  expect(daemon.statusCode, daemon.body).toBe(201);
  const { client_id, client_secret } = daemon.json() as { client_id: string; client_secret: string };
  expect((await clientGrant(client_id, client_secret)).statusCode).toBe(200);
  // Another verification mail to the victim's address: one more code that must not outlive the claim.
  expect((await post('/email/verification', {}, bearer(laptop.access_token))).statusCode).toBe(202);
  await mailed(email, VERIFY, 2);
  return { laptop, phone, apiKey, keyToken, daemon: { client_id, client_secret }, user: registered.json().user };
}

const clientGrant = (clientId: string, secret: string) =>
  post('/token', { grant_type: 'client_credentials', client_id: clientId, client_secret: secret });

type Setup = Awaited<ReturnType<typeof attackerSetsUp>>;

/** Everything the attacker had, tried once more: all of it refused. */
async function attackerTriesEverything(email: string, a: Setup) {
  return {
    password: outcome(await post('/login', { email, password: ATTACKER_PASSWORD })),
    passwordFromTrustedDevice: outcome(
      await post('/login', { email, password: ATTACKER_PASSWORD, device_token: a.laptop.device_token }),
    ),
    refreshLaptop: outcome(await post('/refresh', { refresh_token: a.laptop.refresh_token })),
    refreshPhone: outcome(await post('/refresh', { refresh_token: a.phone.refresh_token })),
    signInLists: outcome(await call('GET', '/sign-ins', undefined, bearer(a.phone.access_token))),
    signInMakesKey: outcome(await post('/keys', { name: 'another', scopes: ['read'] }, bearer(a.laptop.access_token))),
    signInMakesDaemon: outcome(
      await post('/clients', { name: 'rig-2', role: 'daemon' }, bearer(a.laptop.access_token)),
    ),
    keyExchange: outcome(await post('/token', { grant_type: 'api_key', api_key: a.apiKey })),
    keyToken: outcome(await call('GET', '/me', undefined, bearer(a.keyToken))),
    daemon: outcome(await clientGrant(a.daemon.client_id, a.daemon.client_secret)),
  };
}

const NOTHING_LEFT = {
  password: { status: 401, code: 'INVALID_CREDENTIALS' },
  passwordFromTrustedDevice: { status: 401, code: 'INVALID_CREDENTIALS' },
  refreshLaptop: { status: 401, code: 'REFRESH_TOKEN_REVOKED' },
  refreshPhone: { status: 401, code: 'REFRESH_TOKEN_REVOKED' },
  signInLists: { status: 401, code: 'SIGN_IN_ENDED' },
  signInMakesKey: { status: 401, code: 'SIGN_IN_ENDED' },
  signInMakesDaemon: { status: 401, code: 'SIGN_IN_ENDED' },
  keyExchange: { status: 401, code: 'API_KEY_REVOKED' },
  keyToken: { status: 401, code: 'API_KEY_REVOKED' },
  daemon: { status: 401, code: 'INVALID_CLIENT' },
};

/** The victim, signed in with their own password: alone in the account, what the attacker made shown as revoked. */
async function victimAlone(email: string) {
  const login = await post('/login', { email, password: VICTIM_PASSWORD });
  expect(login.statusCode, login.body).toBe(200);
  const token = login.json().access_token as string;
  expect(decodeJwt(token).email_verified).toBe(true);
  const signIns = (await call('GET', '/sign-ins', undefined, bearer(token))).json() as { current: boolean }[];
  expect(signIns.map((s) => s.current)).toEqual([true]);
  const keys = (await call('GET', '/keys?include_revoked=true', undefined, bearer(token))).json();
  expect(keys.map((k: { name: string; revoked_at: string | null }) => [k.name, k.revoked_at !== null])).toEqual([
    ['scraper', true],
  ]);
  const clients = (await call('GET', '/clients?include_revoked=true', undefined, bearer(token))).json();
  expect(clients.map((c: { name: string; revoked_at: string | null }) => [c.name, c.revoked_at !== null])).toEqual([
    ['rig-1', true],
  ]);
}

describe('an address registered by someone else', () => {
  it('becomes its owner’s alone when they verify it with the mailed code, without signing in', async () => {
    const email = uniqueEmail('victim');
    const attacker = await attackerSetsUp(email);
    const code = await codeFrom(email, VERIFY, 1);
    // The code alone does not verify an account whose password its reader does not know: it asks for a new one, and
    // stays unused.
    const bare = await post('/email/verify', { token: code });
    expect(outcome(bare)).toEqual({ status: 400, code: 'NEW_PASSWORD_REQUIRED' });
    expect(bare.json().errors).toEqual([{ path: 'body.new_password', message: expect.any(String) }]);
    // Nor does another user's sign-in, nor an API key's token, stand for the account's.
    const stranger = await post('/register', { email: uniqueEmail('stranger'), password: VICTIM_PASSWORD });
    expect(stranger.statusCode).toBe(201);
    const strangerLogin = (
      await post('/login', { email: stranger.json().user.email, password: VICTIM_PASSWORD })
    ).json();
    expect(outcome(await post('/email/verify', { token: code }, bearer(strangerLogin.access_token)))).toEqual({
      status: 400,
      code: 'NEW_PASSWORD_REQUIRED',
    });
    expect(outcome(await post('/email/verify', { token: code }, bearer(attacker.keyToken)))).toEqual({
      status: 400,
      code: 'NEW_PASSWORD_REQUIRED',
    });
    const claimed = await post('/email/verify', { token: code, new_password: VICTIM_PASSWORD });
    expect(claimed.statusCode, claimed.body).toBe(200);
    expect(claimed.json()).toMatchObject({ id: attacker.user.id, email, email_verified: true });
    expect(await attackerTriesEverything(email, attacker)).toEqual(NOTHING_LEFT);
    // The code the attacker had mailed is over too.
    const later = await codeFrom(email, VERIFY, 2);
    expect(outcome(await post('/email/verify', { token: later, new_password: ATTACKER_PASSWORD }))).toEqual({
      status: 400,
      code: 'INVALID_EMAIL_TOKEN',
    });
    await victimAlone(email);
    expect((await mailed(email, 'Your password was changed')).text).toMatch(/reset your password/);
  });

  it('becomes its owner’s alone when they reset the password', async () => {
    const email = uniqueEmail('victim');
    const attacker = await attackerSetsUp(email);
    expect((await post('/password/forgot', { email })).statusCode).toBe(202);
    const reset = await post('/password/reset', { token: await codeFrom(email, RESET), new_password: VICTIM_PASSWORD });
    expect(reset.statusCode, reset.body).toBe(204);
    expect(await attackerTriesEverything(email, attacker)).toEqual(NOTHING_LEFT);
    // The verification codes the address was sent are over: the reset verified it.
    expect(
      outcome(
        await post('/email/verify', { token: await codeFrom(email, VERIFY, 1), new_password: ATTACKER_PASSWORD }),
      ),
    ).toEqual({ status: 400, code: 'INVALID_EMAIL_TOKEN' });
    await victimAlone(email);
  });

  it('kills what requests racing the claim minted from the account as it was before', async () => {
    const email = uniqueEmail('victim');
    const attacker = await attackerSetsUp(email);
    // Read before the claim commits: a login's view of the account, and the laptop's sign-in as a route saw it.
    const before = (await findUserByEmail(auth.db, email))!;
    const laptop: Principal = {
      subject: before.id,
      kind: 'user',
      roles: before.roles,
      actsFor: before.id,
      tokenId: randomUUID(),
      sessionId: decodeJwt(attacker.laptop.access_token).sid as string,
    };
    const claimed = await post('/email/verify', {
      token: await codeFrom(email, VERIFY, 1),
      new_password: VICTIM_PASSWORD,
    });
    expect(claimed.statusCode, claimed.body).toBe(200);
    // Their writes land after it: a login's refresh token, a key and a daemon of the sign-in it ended.
    const pair = await issueTokenPair(auth.ctx, auth.db, before);
    const key = await createApiKey(auth.ctx, laptop, { name: 'late', scopes: ['read'] });
    const daemon = await createClient(auth.ctx, laptop, { name: 'late-rig', role: 'daemon' });
    expect({
      refresh: outcome(await post('/refresh', { refresh_token: pair.refresh_token })),
      access: outcome(await call('GET', '/me', undefined, bearer(pair.access_token))),
      key: outcome(await post('/token', { grant_type: 'api_key', api_key: key.secret })),
      daemon: outcome(await clientGrant(daemon.client.id, daemon.secret)),
    }).toEqual({
      refresh: { status: 401, code: 'REFRESH_TOKEN_REVOKED' },
      access: { status: 401, code: 'SIGN_IN_ENDED' },
      key: { status: 401, code: 'API_KEY_REVOKED' },
      daemon: { status: 401, code: 'INVALID_CLIENT' },
    });
    // Nor do they show among the owner's sign-ins.
    const login = (await post('/login', { email, password: VICTIM_PASSWORD })).json();
    const signIns = (await call('GET', '/sign-ins', undefined, bearer(login.access_token))).json();
    expect(signIns).toHaveLength(1);
  });
});

describe('an address verified by the one who registered it', () => {
  it('keeps their sign-ins, keys and daemons when they verify signed in', async () => {
    const email = uniqueEmail('owner');
    const own = await attackerSetsUp(email);
    const verified = await post(
      '/email/verify',
      { token: await codeFrom(email, VERIFY, 2) },
      bearer(own.phone.access_token),
    );
    expect(verified.statusCode, verified.body).toBe(200);
    expect(verified.json().email_verified).toBe(true);
    const refreshed = await post('/refresh', { refresh_token: own.laptop.refresh_token });
    expect(refreshed.statusCode).toBe(200);
    expect(decodeJwt(refreshed.json().access_token).email_verified).toBe(true);
    expect((await post('/login', { email, password: ATTACKER_PASSWORD })).statusCode).toBe(200);
    expect((await post('/token', { grant_type: 'api_key', api_key: own.apiKey })).statusCode).toBe(200);
    expect((await clientGrant(own.daemon.client_id, own.daemon.client_secret)).statusCode).toBe(200);
  });
});
