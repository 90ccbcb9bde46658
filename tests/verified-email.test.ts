/**
 * A verified e-mail address before money goes out: billing refuses a user's withdrawal and payout settings until the
 * user verified their address at auth (a code mailed over real SMTP to the mail catcher), and lets them through once
 * their token says so; `access.require_verified_email` chooses the actions. Against the real auth service (EdDSA,
 * JWKS), registry and billing.
 */

import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readCaughtMail, startMailCatcher } from '../scripts/lib/mail-catcher.ts';
import { registerAndLogin } from '../services/auth/test/helpers.ts';
import { base58Encode } from '../services/billing/src/domain/chain/base58.ts';
import type { BillingHarness } from '../services/billing/test/support/setup.ts';
import { useAuthAndRegistry } from './support/auth-and-registry.ts';
import { billingWithRegistry } from './support/billing-with-registry.ts';

const mailDir = mkdtempSync(path.join(tmpdir(), 'verified-email-'));
const catcher = await startMailCatcher({ dir: mailDir });
const platform = useAuthAndRegistry({ mail: { smtp_url: catcher.url } });
/** Billing as shipped (withdrawals and payouts need a verified address), and one that asks it for sessions only. */
let strict: BillingHarness;
let sessionsOnly: BillingHarness;
const urls = { strict: '', sessionsOnly: '' };

beforeAll(async () => {
  strict = await billingWithRegistry(platform);
  urls.strict = await strict.app.listen({ host: '127.0.0.1', port: 0 });
  sessionsOnly = await billingWithRegistry(platform, { config: { access: { require_verified_email: ['sessions'] } } });
  urls.sessionsOnly = await sessionsOnly.app.listen({ host: '127.0.0.1', port: 0 });
});
afterAll(async () => {
  await strict?.close();
  await sessionsOnly?.close();
  await catcher.close();
  rmSync(mailDir, { recursive: true, force: true });
});

const json = { 'content-type': 'application/json' };

async function call(url: string, token: string, method = 'GET', body?: unknown) {
  const res = await fetch(url, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : json) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  return { status: res.status, code: text.startsWith('{') ? (JSON.parse(text).code as string | undefined) : undefined };
}

/** A user signed in at auth, with a funded wallet at `billing`. */
async function userWithWallet(billing: BillingHarness, url: string, roles: string[] = ['renter']) {
  const signedIn = await registerAndLogin(platform.auth.app, { roles });
  const wallet = await fetch(`${url}/api/v1/wallet`, {
    method: 'POST',
    headers: { authorization: `Bearer ${signedIn.tokens.access_token}`, ...json },
    body: JSON.stringify({
      owner_type: 'user',
      owner_id: signedIn.user.id,
      solana_address: base58Encode(randomBytes(32)),
    }),
  });
  expect(wallet.status).toBe(201);
  const walletId = ((await wallet.json()) as { id: string }).id;
  await billing.credit(walletId, '100');
  return { ...signedIn, walletId };
}

/**
 * Verifies the user's address with the code auth mailed at registration, sent with their sign-in (without it the code
 * would take a new password); a refreshed access token says so.
 */
async function verify(email: string, tokens: { access_token: string; refresh_token: string }): Promise<string> {
  const deadline = Date.now() + 30_000;
  let code: string | undefined;
  while (!code) {
    const mail = (await readCaughtMail(mailDir)).find((m) => m.to === email);
    code = mail && /Your code:\s+(\S+)/.exec(mail.text)?.[1];
    if (!code) {
      if (Date.now() > deadline) throw new Error(`no verification mail to ${email}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  const verified = await fetch(`${platform.authUrl}/api/v1/auth/email/verify`, {
    method: 'POST',
    headers: { ...json, authorization: `Bearer ${tokens.access_token}` },
    body: JSON.stringify({ token: code }),
  });
  expect(verified.status).toBe(200);
  const refreshed = await fetch(`${platform.authUrl}/api/v1/auth/refresh`, {
    method: 'POST',
    headers: json,
    body: JSON.stringify({ refresh_token: tokens.refresh_token }),
  });
  return ((await refreshed.json()) as { access_token: string }).access_token;
}

const withdrawal = { amount: '1', destination: base58Encode(randomBytes(32)) };

describe('a verified e-mail address before money goes out', () => {
  it('refuses a withdrawal until the address is verified, then lets it through to the chain', async () => {
    const u = await userWithWallet(strict, urls.strict);
    const withdraw = (token: string) =>
      call(`${urls.strict}/api/v1/wallet/${u.walletId}/withdraw`, token, 'POST', withdrawal);
    expect(await withdraw(u.tokens.access_token)).toEqual({ status: 403, code: 'EMAIL_NOT_VERIFIED' });
    // Reading the balance needs no verified address.
    expect((await call(`${urls.strict}/api/v1/wallet/${u.walletId}/balance`, u.tokens.access_token)).status).toBe(200);
    const verifiedToken = await verify(u.email, u.tokens);
    // Past the check: this billing has no chain, which is what answers now.
    expect(await withdraw(verifiedToken)).toEqual({ status: 503, code: 'SOLANA_NOT_CONFIGURED' });
  });

  it("refuses an unverified provider's payout destination", async () => {
    const provider = await registerAndLogin(platform.auth.app, { roles: ['provider'] });
    const machine = provider.user.id;
    const put = await call(
      `${urls.strict}/api/v1/provider/${machine}/payout-settings`,
      provider.tokens.access_token,
      'PUT',
      { auto_payout: false },
    );
    expect(put).toEqual({ status: 403, code: 'EMAIL_NOT_VERIFIED' });
  });

  it('asks it for the actions the setting names only', async () => {
    const u = await userWithWallet(sessionsOnly, urls.sessionsOnly);
    const base = urls.sessionsOnly;
    expect(
      await call(`${base}/api/v1/wallet/${u.walletId}/withdraw`, u.tokens.access_token, 'POST', withdrawal),
    ).toEqual({
      status: 503,
      code: 'SOLANA_NOT_CONFIGURED',
    });
    const start = await call(`${base}/api/v1/billing/start-session`, u.tokens.access_token, 'POST', {
      user_id: u.user.id,
      wallet_id: u.walletId,
      provider_id: u.user.id,
      gpu_count: 1,
      requested_vram_mb: 0,
      estimated_power_w: 0,
    });
    expect(start).toEqual({ status: 403, code: 'EMAIL_NOT_VERIFIED' });
  });
});
