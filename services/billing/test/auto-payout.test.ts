/**
 * Automatic payouts, a provider setting, against the real local chain: with it on, a provider's earnings are paid on
 * chain once a session ends and they reach the minimum payout; never twice (concurrent ends, the sweep beside them,
 * a second instance); below the minimum they wait; only the wallet's holder (or an admin) turns it on, a service only
 * to the wallet's own address, never to a program or a token account.
 */
import { TOKEN_PROGRAM_ID } from '@solana/spl-token';
import { Keypair } from '@solana/web3.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Dec } from '../src/domain/ledger/money.ts';
import {
  autoPayoutBackoffMs,
  payOutEarnings,
  settleAutoPayouts,
  sweepAutoPayouts,
} from '../src/domain/wallets/auto-payout.ts';
import { reconcilePending } from '../src/domain/wallets/reconcile.ts';
import { type Localnet, setupLocalnet } from './support/localnet.ts';
import { end, manualClock, start } from './support/sessions.ts';
import { type BillingHarness, setupBilling } from './support/setup.ts';

let h: BillingHarness;
let L: Localnet;
const clock = manualClock();

beforeAll(async () => {
  L = await setupLocalnet(6);
  // The providers here charge 200/h per GPU: a minute on 4 GPUs earns 12.666666 after the 5% fee (minimum payout 10).
  h = await setupBilling({ chain: L.chain, now: clock.now });
});
afterAll(async () => {
  await h?.close();
});

const fresh = () => Keypair.generate().publicKey.toBase58();
const as = (headers: Record<string, string>) => ({
  get: (url: string) => h.app.inject({ method: 'GET', url, headers }),
  put: (url: string, payload: object) => h.app.inject({ method: 'PUT', url, payload, headers }),
});

/** A provider wallet held by a new user (with its address), its rates set high, and a funded renter. */
async function provider() {
  const owner = await h.issuer.user(['provider']);
  const address = fresh();
  const wallet = await h.fundedWallet('0', 'provider', address, { holderId: owner.id });
  const rates = await as(owner.headers).put(`/api/v1/provider/${wallet.ownerId}/rates`, {
    base_rates: { default: '200' },
    vram_rate_per_gb_hour: '0',
    power_rate_per_watt_hour: '0',
  });
  expect(rates.statusCode, rates.body).toBe(200);
  const renter = await h.fundedWallet('10000');
  return { owner, address, wallet, providerId: wallet.ownerId, renter };
}

/** A session of `minutes` on `gpus` of the provider's machine, ended: the provider's earnings for it. */
async function rental(p: Awaited<ReturnType<typeof provider>>, minutes: number, gpus = 4) {
  const started = await start(h, {
    user_id: p.renter.ownerId,
    wallet_id: p.renter.id,
    provider_id: p.providerId,
    job_id: crypto.randomUUID(),
    gpu_model: 'NVIDIA A100-SXM4-80GB',
    gpu_count: gpus,
    requested_vram_mb: 0,
    estimated_power_w: 0,
  });
  expect(started.statusCode, started.body).toBe(201);
  clock.advance(minutes * 60_000);
  const ended = await end(h, started.json().session.id);
  expect(ended.statusCode, ended.body).toBe(200);
  // The end's prompt to pay out, done before the test looks.
  await settleAutoPayouts(h.ctx);
  return ended.json().billing_record.provider_earnings as string;
}

const payouts = (walletId: string) =>
  h.db
    .selectFrom('transactions')
    .select(['amount', 'status', 'destination'])
    .where('wallet_id', '=', walletId)
    .where('type', '=', 'payout')
    .orderBy('amount')
    .execute();

describe('automatic payouts', () => {
  it('is off by default; when on, a session end that brings earnings to the minimum pays them all on chain', async () => {
    const p = await provider();
    const url = `/api/v1/provider/${p.providerId}/payout-settings`;
    const initial = await as(p.owner.headers).get(url);
    expect(initial.json()).toMatchObject({
      provider_id: p.providerId,
      wallet_id: p.wallet.id,
      auto_payout: false,
      destination: null,
      minimum_payout: '10.000000',
    });
    // Off: earnings stay in the wallet.
    const first = await rental(p, 1); // 4 × 200/h × 1 min = 13.333333, less the 5% fee
    expect(first).toBe('12.666666');
    await settleAutoPayouts(h.ctx);
    expect(await payouts(p.wallet.id)).toEqual([]);

    // On (to the wallet's own address by default): what is already due is paid at once.
    const on = await as(p.owner.headers).put(url, { auto_payout: true });
    expect(on.statusCode, on.body).toBe(200);
    expect(on.json()).toMatchObject({ auto_payout: true, destination: p.address });
    await settleAutoPayouts(h.ctx);
    expect(await L.chain.tokenBalance(p.address)).toBe('12.666666');

    // Below the minimum, nothing is sent; the next end that brings the sum to it pays the sum.
    expect(await rental(p, 1, 2)).toBe('6.333334'); // 2 × 200/h × 1 min = 6.666667, less the fee
    await settleAutoPayouts(h.ctx);
    expect(await sweepAutoPayouts(h.ctx)).toBe(0);
    expect(await L.chain.tokenBalance(p.address)).toBe('12.666666');
    await rental(p, 0.5, 2); // one started minute: 6.333334 more
    await settleAutoPayouts(h.ctx);
    expect(await L.chain.tokenBalance(p.address)).toBe('25.333334');
    expect(await payouts(p.wallet.id)).toEqual([
      { amount: '12.666666', status: 'confirmed', destination: p.address },
      { amount: '12.666668', status: 'confirmed', destination: p.address },
    ]);
    const earnings = await as(p.owner.headers).get(`/api/v1/provider/${p.providerId}/earnings`);
    expect(earnings.json()).toMatchObject({ total_paid_out: '25.333334', available_for_payout: '0.000000' });
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('waits below the minimum and pays to the chosen address; turned off, pays nothing more', async () => {
    const p = await provider();
    const url = `/api/v1/provider/${p.providerId}/payout-settings`;
    const elsewhere = fresh();
    const on = await as(p.owner.headers).put(url, { auto_payout: true, destination: elsewhere });
    expect(on.json()).toMatchObject({ auto_payout: true, destination: elsewhere });
    // 12.666666 is due: paid to the chosen address, not the wallet's.
    await rental(p, 1);
    await settleAutoPayouts(h.ctx);
    expect(await L.chain.tokenBalance(elsewhere)).toBe('12.666666');
    expect(await L.chain.tokenBalance(p.address)).toBe('0');

    const off = await as(p.owner.headers).put(url, { auto_payout: false });
    expect(off.json()).toMatchObject({ auto_payout: false, destination: null });
    await rental(p, 1);
    await settleAutoPayouts(h.ctx);
    expect(await sweepAutoPayouts(h.ctx)).toBe(0);
    expect(await L.chain.tokenBalance(elsewhere)).toBe('12.666666');
    expect((await as(p.owner.headers).get(`/api/v1/provider/${p.providerId}/earnings`)).json()).toMatchObject({
      available_for_payout: '12.666666',
    });
  });

  it('never pays the same earnings twice: concurrent attempts, the sweep and a second instance', async () => {
    const p = await provider();
    await rental(p, 2); // 25.333334 due, auto payout still off
    await h.db.updateTable('wallets').set({ auto_payout_to: p.address }).where('id', '=', p.wallet.id).execute();
    // Five attempts at once in this instance, and a second instance's (its own in-flight map) beside them.
    const second = { ...h.ctx, state: { ...h.ctx.state, autoPayouts: new Map() } };
    const results = await Promise.all([
      payOutEarnings(h.ctx, p.wallet.id),
      payOutEarnings(second, p.wallet.id),
      payOutEarnings(second, p.wallet.id),
      sweepAutoPayouts(h.ctx),
      sweepAutoPayouts(second),
    ]);
    // Whichever attempt came first paid (a sweep's answer is a count): the others found nothing left.
    expect(results.slice(0, 3).filter((r) => r === 'confirmed').length).toBeLessThanOrEqual(1);
    expect(await L.chain.tokenBalance(p.address)).toBe('25.333334');
    expect(await payouts(p.wallet.id)).toEqual([{ amount: '25.333334', status: 'confirmed', destination: p.address }]);
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('backs off a payout that fails, so failing wallets never crowd out the others or burn fees every round', async () => {
    // Three wallets whose address turned into something that cannot hold tokens (the mint), then a good one.
    const bad = [];
    for (let i = 0; i < 3; i++) {
      const p = await provider();
      await rental(p, 1);
      await h.db
        .updateTable('wallets')
        .set({ auto_payout_to: L.mint.toBase58() })
        .where('id', '=', p.wallet.id)
        .execute();
      bad.push(p);
    }
    const good = await provider();
    await rental(good, 1);
    await h.db.updateTable('wallets').set({ auto_payout_to: good.address }).where('id', '=', good.wallet.id).execute();

    // A round of three takes the oldest: the failing ones, which then wait; the next round reaches the good one.
    const before = Date.now();
    expect(await sweepAutoPayouts(h.ctx, 3)).toBe(3);
    const failing = await h.db
      .selectFrom('wallets')
      .select(['auto_payout_failures', 'auto_payout_retry_at'])
      .where(
        'id',
        'in',
        bad.map((p) => p.wallet.id),
      )
      .execute();
    for (const w of failing) {
      expect(w.auto_payout_failures).toBe(1);
      expect(w.auto_payout_retry_at!.getTime()).toBeGreaterThanOrEqual(before + autoPayoutBackoffMs(1));
    }
    expect(await sweepAutoPayouts(h.ctx, 3)).toBe(1);
    expect(await L.chain.tokenBalance(good.address)).toBe('12.666666');
    // Waiting out its backoff, a failing wallet is not tried again, even on a session end's prompt.
    expect(await payOutEarnings(h.ctx, bad[0]!.wallet.id)).toBeNull();
    for (const p of bad) expect(await payouts(p.wallet.id)).toEqual([]);
    // Fixing the setting clears the failures: paid at once.
    const fixed = await as(bad[0]!.owner.headers).put(`/api/v1/provider/${bad[0]!.providerId}/payout-settings`, {
      auto_payout: true,
    });
    expect(fixed.statusCode, fixed.body).toBe(200);
    await settleAutoPayouts(h.ctx);
    expect(await L.chain.tokenBalance(bad[0]!.address)).toBe('12.666666');
    expect(autoPayoutBackoffMs(1)).toBe(60_000);
    expect(autoPayoutBackoffMs(3)).toBe(240_000);
    expect(autoPayoutBackoffMs(40)).toBe(86_400_000);
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('backs off a payout that failed only after its attempt ended, when reconciliation settles it', async () => {
    const p = await provider();
    await rental(p, 1);
    await h.db.updateTable('wallets').set({ auto_payout_to: p.address }).where('id', '=', p.wallet.id).execute();
    // The attempt ends with its transfer signed and recorded but not out (a send that timed out): pending.
    const chain = L.chain;
    const unsent = Object.create(chain, { sendAndConfirm: { value: async () => 'unknown' } });
    expect(await payOutEarnings({ ...h.ctx, chain: unsent }, p.wallet.id)).toBe('pending');
    // The treasury's tokens leave behind billing's back: reconciliation re-sends the transfer, which fails on chain.
    const elsewhere = await L.user(0n);
    const held = BigInt(new Dec(await chain.tokenBalance(chain.treasuryAddress())).times(L.unit.toString()).toFixed());
    await L.transfer(L.treasury, elsewhere.publicKey, held);
    const before = Date.now();
    try {
      expect(await reconcilePending(h.ctx)).toMatchObject({ failed: 1 });
    } finally {
      await L.transfer(elsewhere, L.treasury.publicKey, held);
    }
    expect(await payouts(p.wallet.id)).toEqual([{ amount: '12.666666', status: 'failed', destination: p.address }]);
    const wallet = await h.db
      .selectFrom('wallets')
      .select(['auto_payout_failures', 'auto_payout_retry_at', 'auto_payout_last_failure'])
      .where('id', '=', p.wallet.id)
      .executeTakeFirstOrThrow();
    expect(wallet.auto_payout_failures).toBe(1);
    expect(wallet.auto_payout_retry_at!.getTime()).toBeGreaterThanOrEqual(before + autoPayoutBackoffMs(1));
    expect(wallet.auto_payout_last_failure).toMatch(/failed on chain/);
    // Its earnings are back, and it waits out the backoff rather than being sent again at the next round.
    expect(await payOutEarnings(h.ctx, p.wallet.id)).toBeNull();
    expect(await payouts(p.wallet.id)).toHaveLength(1);
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('pays nothing to an address the holder moved away from while the payout was being prepared', async () => {
    const p = await provider();
    await rental(p, 1);
    await h.db.updateTable('wallets').set({ auto_payout_to: p.address }).where('id', '=', p.wallet.id).execute();
    // The real chain, with the holder's change landing between the payout's first read and its debit.
    const moved = fresh();
    const chain = L.chain;
    const racing = Object.create(chain, {
      prepareTransfer: {
        value: async (to: string, amount: string) => {
          await h.db.updateTable('wallets').set({ auto_payout_to: moved }).where('id', '=', p.wallet.id).execute();
          return chain.prepareTransfer(to, amount);
        },
      },
    });
    expect(await payOutEarnings({ ...h.ctx, chain: racing }, p.wallet.id)).toBeNull();
    expect(await L.chain.tokenBalance(p.address)).toBe('0');
    expect(await payouts(p.wallet.id)).toEqual([]);
    // The next attempt pays the new address.
    expect(await payOutEarnings(h.ctx, p.wallet.id)).toBe('confirmed');
    expect(await L.chain.tokenBalance(moved)).toBe('12.666666');
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('is set by the holder anywhere, by an admin or a service only to the own address; never to a program or token account', async () => {
    const p = await provider();
    const url = `/api/v1/provider/${p.providerId}/payout-settings`;
    const stranger = await h.issuer.user(['provider']);
    const service = await h.issuer.client('service');
    const daemon = await h.issuer.client('daemon', p.owner.id);
    expect((await as(stranger.headers).put(url, { auto_payout: true })).statusCode).toBe(403);
    expect((await as(stranger.headers).get(url)).statusCode).toBe(403);
    // The owner's daemon reads it (as it reads earnings) but never changes where money goes.
    expect((await as(daemon.headers).get(url)).statusCode).toBe(200);
    expect((await as(daemon.headers).put(url, { auto_payout: true })).statusCode).toBe(403);
    for (const privileged of [service, h.admin]) {
      const redirected = await as(privileged.headers).put(url, { auto_payout: true, destination: fresh() });
      expect(redirected.statusCode).toBe(403);
      expect(redirected.json().code).toBe('DESTINATION_NOT_ALLOWED');
      const own = await as(privileged.headers).put(url, { auto_payout: true });
      expect(own.statusCode).toBe(200);
      expect(own.json().destination).toBe(p.address);
    }
    // The holder names another address.
    const elsewhere = fresh();
    const moved = await as(p.owner.headers).put(url, { auto_payout: true, destination: elsewhere });
    expect(moved.statusCode, moved.body).toBe(200);
    expect(moved.json().destination).toBe(elsewhere);

    // The token program and the mint strand tokens: refused, the setting unchanged.
    for (const bad of [TOKEN_PROGRAM_ID.toBase58(), L.mint.toBase58()]) {
      const res = await as(p.owner.headers).put(url, { auto_payout: true, destination: bad });
      expect(res.statusCode, res.body).toBe(400);
      expect(res.json().code).toBe('INVALID_DESTINATION');
    }
    expect((await as(p.owner.headers).get(url)).json()).toMatchObject({ destination: elsewhere });
    const malformed = await as(p.owner.headers).put(url, { auto_payout: 'yes' });
    expect(malformed.statusCode).toBe(400);
    // A machine that is not theirs (without a registry: any machine without their wallet) is 403, as for a stranger;
    // only an admin learns that it has no wallet.
    const unknownUrl = `/api/v1/provider/${crypto.randomUUID()}/payout-settings`;
    const unknown = await as(p.owner.headers).put(unknownUrl, { auto_payout: false });
    expect(unknown.statusCode).toBe(403);
    expect(unknown.json().code).toBe('NOT_PROVIDER_OWNER');
    const byAdmin = await as(h.admin.headers).put(unknownUrl, { auto_payout: false });
    expect(byAdmin.statusCode).toBe(404);
    expect(byAdmin.json().code).toBe('WALLET_NOT_FOUND');
  });

  it('needs a destination for a wallet without an address', async () => {
    const owner = await h.issuer.user(['provider']);
    const wallet = await h.fundedWallet('0', 'provider', undefined, { holderId: owner.id });
    await h.db.updateTable('wallets').set({ solana_address: null }).where('id', '=', wallet.id).execute();
    const url = `/api/v1/provider/${wallet.ownerId}/payout-settings`;
    const res = await as(owner.headers).put(url, { auto_payout: true });
    expect(res.statusCode).toBe(400);
    expect(res.json().code).toBe('DESTINATION_REQUIRED');
    const named = fresh();
    expect((await as(owner.headers).put(url, { auto_payout: true, destination: named })).json()).toMatchObject({
      auto_payout: true,
      destination: named,
    });
  });
});
