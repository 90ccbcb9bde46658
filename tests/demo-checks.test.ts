/**
 * What `pnpm demo` decides from what it reads (scripts/lib/demo-checks.ts, payoutsSettled): whether a data folder is
 * the running platform's, what it says when auth refuses a sign-up for its rate limit, how long it waits for the
 * restarted daemon's usage, and when the payouts are over, whatever they add up to. (The whole demo runs in
 * tests/start.test.ts.)
 */
import { generateKeyPairSync } from 'node:crypto';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { jwksHoldsFolderKey, signUpRateLimited, usageResumeTimeoutMs } from '../scripts/lib/demo-checks.ts';
import { type MarketFigures, payoutsSettled, reconcile } from '../scripts/lib/demo-reconcile.ts';

/** An auth folder with a signing key of its own, as `pnpm start` makes at a first start, and its public JWK. */
function authFolder(type: 'ed25519' | 'ec' = 'ed25519', file = 'jwt-signing-key.pem') {
  const dir = path.join(mkdtempSync(path.join(tmpdir(), 'demo-folder-')), 'auth');
  mkdirSync(dir);
  const pair = type === 'ec' ? generateKeyPairSync('ec', { namedCurve: 'prime256v1' }) : generateKeyPairSync('ed25519');
  writeFileSync(path.join(dir, file), pair.privateKey.export({ format: 'pem', type: 'pkcs8' }));
  // As auth publishes it: the public members, with its kid, alg and use.
  const jwk = { ...pair.publicKey.export({ format: 'jwk' }), kid: 'k1', alg: 'EdDSA', use: 'sig' };
  return { dir, jwk: jwk as Record<string, unknown> };
}

describe("the demo's data-folder check", () => {
  it("takes the folder whose signing key the running platform publishes, and no other folder's", () => {
    const own = authFolder();
    const other = authFolder();
    expect(jwksHoldsFolderKey(own.dir, [own.jwk])).toBe(true);
    // Retired keys are published too: the folder's among them is enough.
    expect(jwksHoldsFolderKey(own.dir, [other.jwk, own.jwk])).toBe(true);
    // Every data folder has the same mint; the key is the folder's own.
    expect(jwksHoldsFolderKey(other.dir, [own.jwk])).toBe(false);
    // HS256 publishes nothing; a folder with no key (a key of the user's) holds nothing to compare.
    expect(jwksHoldsFolderKey(own.dir, [])).toBe(false);
    expect(jwksHoldsFolderKey(path.join(own.dir, 'none'), [own.jwk])).toBe(false);
    const ec = authFolder('ec', 'jwt-signing-key-ES256.pem');
    expect(jwksHoldsFolderKey(ec.dir, [own.jwk, ec.jwk])).toBe(true);
    expect(jwksHoldsFolderKey(ec.dir, [own.jwk])).toBe(false);
  });
});

describe("the demo's words for a sign-up auth refuses (429)", () => {
  it('says what happened, when it passes and how to raise the limit', () => {
    const said = signUpRateLimited('1800');
    expect(said).toMatch(/^auth refused the sign-up: 429 RATE_LIMITED\./);
    expect(said).toContain('rate_limit.register_per_ip, 10 by default');
    expect(said).toContain('127.0.0.1');
    expect(said).toContain('again in 30 minutes');
    expect(said).toContain('AUTH__RATE_LIMIT__REGISTER_PER_IP=1000/1h pnpm start');
    expect(signUpRateLimited('42')).toContain('again in 42 s');
    expect(signUpRateLimited(null)).toContain('again within the hour');
  });
});

describe("the demo's wait for the restarted daemon's usage", () => {
  it('lasts to the next minute of the clock and 90 s more, two minutes at least', () => {
    const minute = 29_000_000 * 60_000;
    // Killed 5 s into a minute: the next report to count comes 55 s later; two minutes in all.
    expect(usageResumeTimeoutMs(minute + 5_000)).toBe(145_000);
    // Killed late in the minute: still two minutes, never the 60 s that a loaded machine overran.
    expect(usageResumeTimeoutMs(minute + 59_000)).toBe(120_000);
    expect(usageResumeTimeoutMs(minute)).toBe(150_000);
  });
});

describe("the demo's wait for the payouts", () => {
  const earnings = { available_for_payout: '0.000000', pending_payouts: '0.000000', minimum_payout: '10.000000' };
  const settled = (over: Partial<typeof earnings>, payouts: { amount: string; status: string }[]) =>
    payoutsSettled({ decimals: 6, earnings: { ...earnings, ...over }, payouts });

  it('ends once no payout is under way or due, whatever the payouts add up to', () => {
    const paid = [{ amount: '14.236887', status: 'confirmed' }];
    expect(settled({}, paid)).toBe(true);
    // One pending, by its status or in the earnings: under way.
    expect(settled({}, [...paid, { amount: '9.000000', status: 'pending' }])).toBe(false);
    expect(settled({ pending_payouts: '9.000000' }, paid)).toBe(false);
    // Earnings over the minimum not paid yet: due (billing pays them at a session's end or its next interval).
    expect(settled({ available_for_payout: '12.811887' }, paid)).toBe(false);
    // Under the minimum, billing pays nothing: the wait is over, and the reconciliation says what is missing.
    expect(settled({ available_for_payout: '9.999999' }, paid)).toBe(true);
    // A failed payout is not under way (billing retries it from the earnings, which are then due).
    expect(settled({}, [...paid, { amount: '1.000000', status: 'failed' }])).toBe(true);
    // The same earnings paid twice: the wait ends (waiting for the payouts to equal the earnings never would)...
    expect(settled({}, [...paid, ...paid])).toBe(true);
  });

  it('...and the reconciliation shows a payout too many, or too large, as a FAIL line', () => {
    const market: MarketFigures = {
      decimals: 6,
      sessions: [
        { totalCost: '14.986197', providerEarnings: '14.236887', platformFee: '0.749310', platformFeePercent: '5' },
      ],
      renters: [],
      payouts: ['14.236887'],
      payoutFees: ['0'],
      payoutAddressOnChain: '14.236887',
      treasuryBefore: '1000',
      treasuryAfter: '985.763113',
    };
    const failing = (f: MarketFigures) =>
      reconcile(f)
        .filter((c) => !c.ok)
        .map((c) => c.line);
    expect(failing(market)).toEqual([]);
    const twice = {
      ...market,
      payouts: ['14.236887', '14.236887'],
      payoutFees: ['0', '0'],
      payoutAddressOnChain: '28.473774',
      treasuryAfter: '971.526226',
    };
    expect(failing(twice)).toEqual(['paid out on chain 28.473774 = provider earned 14.236887']);
    const over = { ...market, payouts: ['15.000000'], payoutAddressOnChain: '15', treasuryAfter: '985' };
    expect(failing(over)).toEqual(['paid out on chain 15.000000 = provider earned 14.236887']);
  });
});
