/**
 * Withdrawals and payouts against the real local chain: debit first, ATA
 * creation, chain failure reversal, idempotency, and reconciliation after a
 * crash at each point between debit and settlement.
 */
import { Keypair } from '@solana/web3.js';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { getTransaction } from '../src/db/transaction-repository.ts';
import type { Chain } from '../src/domain/chain/chain.ts';
import { createHold, postHold } from '../src/domain/ledger/holds.ts';
import { Dec } from '../src/domain/ledger/money.ts';
import { recordIntent } from '../src/domain/wallets/payouts.ts';
import { reconcilePending } from '../src/domain/wallets/reconcile.ts';
import { type Localnet, localnetRpc, setupLocalnet } from './support/localnet.ts';
import { type BillingHarness, setupBilling } from './support/setup.ts';
import { startPrivateLocalnet } from './support/solana-fixture.ts';

let h: BillingHarness;
let L: Localnet;
// A chain of this file's own: the expiry test warps it 400 slots, which would expire
// transactions that other test files have prepared on the shared chain.
let net: { rpcUrl: string; stop(): Promise<void> };

beforeAll(async () => {
  net = await startPrivateLocalnet();
  L = await setupLocalnet(6, net.rpcUrl);
  h = await setupBilling({ chain: L.chain });
});
afterAll(async () => {
  await h?.close();
  await net?.stop();
});

const post = (url: string, payload: object, headers: Record<string, string> = {}) =>
  h.app.inject({ method: 'POST', url, payload, headers });
const fresh = () => Keypair.generate().publicKey.toBase58();

/** The balances of the platform's fees and of what left for the chain. */
async function systemBalances() {
  const { accounts } = await h.assertLedgerConsistent();
  const of = (kind: string) => new Dec(accounts.find((a) => a.kind === kind)?.balance ?? '0');
  return { platform_fees: of('platform_fees'), chain_outgoing: of('chain_outgoing') };
}

describe('POST /api/v1/wallet/{id}/withdraw', () => {
  it('sends tokens to the wallet address, creating its token account, and settles the debit', async () => {
    const address = fresh(); // no token account yet
    const w = await h.fundedWallet('30', 'user', address);
    const res = await post(`/api/v1/wallet/${w.id}/withdraw`, { amount: '12.345678' });
    expect(res.statusCode, res.body).toBe(200);
    const tx = res.json();
    expect(tx).toMatchObject({ type: 'withdrawal', status: 'confirmed', amount: '12.345678', destination: address });
    expect(tx.signature).toMatch(/^[1-9A-HJ-NP-Za-km-z]{64,88}$/);
    expect(await L.chain.tokenBalance(address)).toBe('12.345678');
    expect(await h.balanceOf(w.id)).toMatchObject({ available: '17.654322', pending: '0.000000', total: '17.654322' });

    const other = fresh();
    // Another address than the wallet's: its holder names it.
    const toOther = await post(
      `/api/v1/wallet/${w.id}/withdraw`,
      { amount: '1', destination: other },
      await h.holderHeaders(w),
    );
    expect(toOther.statusCode).toBe(200);
    expect(await L.chain.tokenBalance(other)).toBe('1');
    const list = await h.app.inject({ method: 'GET', url: `/api/v1/wallet/${w.id}/transactions?type=withdrawal` });
    expect(list.json().map((t: { status: string }) => t.status)).toEqual(['confirmed', 'confirmed']);
    const events = await h.db
      .selectFrom('outbox_events')
      .select('kind')
      .where('kind', 'like', 'withdrawal.%')
      .execute();
    expect(events.map((e) => e.kind).sort()).toEqual([
      'withdrawal.confirmed',
      'withdrawal.confirmed',
      'withdrawal.pending',
      'withdrawal.pending',
    ]);
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('withholds the token account fee from a transfer that creates the account, and only then', async () => {
    h.ctx.tokenAccountFee = '0.5';
    try {
      const before = await systemBalances();
      const address = fresh(); // no token account yet: the treasury pays its rent
      const w = await h.fundedWallet('20', 'user', address);
      const first = await post(`/api/v1/wallet/${w.id}/withdraw`, { amount: '10' });
      expect(first.statusCode, first.body).toBe(200);
      expect(first.json()).toMatchObject({ status: 'confirmed', amount: '10.000000', fee: '0.500000' });
      expect(await L.chain.tokenBalance(address)).toBe('9.5');
      expect(await h.balanceOf(w.id)).toMatchObject({ available: '10.000000', pending: '0.000000' });
      // The account is there now: the next transfer sends the whole amount.
      const second = await post(`/api/v1/wallet/${w.id}/withdraw`, { amount: '3' });
      expect(second.json()).toMatchObject({ status: 'confirmed', amount: '3.000000', fee: '0.000000' });
      expect(await L.chain.tokenBalance(address)).toBe('12.5');
      // The fee is the platform's; what left the treasury is what was sent.
      const after = await systemBalances();
      expect(after.platform_fees.minus(before.platform_fees).toFixed()).toBe('0.5');
      expect(after.chain_outgoing.minus(before.chain_outgoing).toFixed()).toBe('12.5');
      // No more than the fee, to an address without an account: refused, nothing debited, sent or recorded.
      const other = fresh();
      const asHolder = await h.holderHeaders(w);
      for (const amount of ['0.5', '0.2']) {
        const res = await post(`/api/v1/wallet/${w.id}/withdraw`, { amount, destination: other }, asHolder);
        expect(res.statusCode, res.body).toBe(400);
        expect(res.json()).toMatchObject({ code: 'INVALID_TRANSFER' });
        expect(res.json().detail).toMatch(/no token account/);
      }
      expect(await h.balanceOf(w.id)).toMatchObject({ available: '7.000000', pending: '0.000000' });
      const list = await h.app.inject({ method: 'GET', url: `/api/v1/wallet/${w.id}/transactions?type=withdrawal` });
      expect(list.json()).toHaveLength(2);
      expect(await L.chain.tokenBalance(other)).toBe('0');
      expect((await h.assertLedgerConsistent()).problems).toEqual([]);
    } finally {
      h.ctx.tokenAccountFee = '0';
    }
  });

  it('lets a wallet make withdrawals_per_hour withdrawals an hour, concurrent ones too; a refused one moves nothing', async () => {
    const before = h.ctx.withdrawalLimit;
    h.ctx.withdrawalLimit = { perHour: 2 };
    try {
      const w = await h.fundedWallet('10', 'user', fresh());
      // One refused for its amount (nothing debited) does not count.
      expect((await post(`/api/v1/wallet/${w.id}/withdraw`, { amount: '11' })).statusCode).toBe(402);
      for (const amount of ['1', '2']) {
        const ok = await post(`/api/v1/wallet/${w.id}/withdraw`, { amount });
        expect(ok.statusCode, ok.body).toBe(200);
      }
      const refused = await post(`/api/v1/wallet/${w.id}/withdraw`, { amount: '0.000001' });
      expect(refused.statusCode).toBe(429);
      expect(refused.json()).toMatchObject({ code: 'RATE_LIMITED' });
      expect(refused.json().detail).toMatch(/2 withdrawals within the hour/);
      // A key refused for the window is not taken: the same key goes through once the wallet may withdraw again.
      const keyed = { 'idempotency-key': `limited-${w.id}` };
      expect((await post(`/api/v1/wallet/${w.id}/withdraw`, { amount: '0.5' }, keyed)).statusCode).toBe(429);
      const retryAfter = Number(refused.headers['retry-after']);
      expect(retryAfter).toBeGreaterThan(3000);
      expect(retryAfter).toBeLessThanOrEqual(3600);
      expect(await h.balanceOf(w.id)).toMatchObject({ available: '7.000000', pending: '0.000000' });
      const list = await h.app.inject({ method: 'GET', url: `/api/v1/wallet/${w.id}/transactions?type=withdrawal` });
      expect(list.json()).toHaveLength(2);
      h.ctx.withdrawalLimit = { perHour: 3 };
      const retried = await post(`/api/v1/wallet/${w.id}/withdraw`, { amount: '0.5' }, keyed);
      expect(retried.statusCode, retried.body).toBe(200);
      expect(await h.balanceOf(w.id)).toMatchObject({ available: '6.500000' });
      h.ctx.withdrawalLimit = { perHour: 2 };

      // Five at once from a fresh wallet: two go through, three are refused, whichever instance or order.
      const other = await h.fundedWallet('10', 'user', fresh());
      const answers = await Promise.all(
        Array.from({ length: 5 }, () => post(`/api/v1/wallet/${other.id}/withdraw`, { amount: '1' })),
      );
      expect(answers.map((r) => r.statusCode).sort()).toEqual([200, 200, 429, 429, 429]);
      expect(await h.balanceOf(other.id)).toMatchObject({ available: '8.000000', pending: '0.000000' });
      expect((await h.assertLedgerConsistent()).problems).toEqual([]);
    } finally {
      h.ctx.withdrawalLimit = before;
    }
  });

  it('counts the hour before each withdrawal, not a fixed window: never more than the limit within an hour', async () => {
    const before = { limit: h.ctx.withdrawalLimit, now: h.ctx.now };
    h.ctx.withdrawalLimit = { perHour: 2 };
    const start = Date.now();
    const at = (minutes: number) => {
      h.ctx.now = () => new Date(start + minutes * 60_000);
    };
    try {
      const w = await h.fundedWallet('10', 'user', fresh());
      const withdraw = () => post(`/api/v1/wallet/${w.id}/withdraw`, { amount: '1' });
      at(0);
      expect((await withdraw()).statusCode).toBe(200);
      at(50);
      expect((await withdraw()).statusCode).toBe(200);
      at(55);
      const full = await withdraw();
      expect(full.statusCode).toBe(429);
      // Until the first is an hour old: five minutes.
      expect(Number(full.headers['retry-after'])).toBeGreaterThanOrEqual(295);
      expect(Number(full.headers['retry-after'])).toBeLessThanOrEqual(301);
      at(61);
      expect((await withdraw()).statusCode).toBe(200);
      // Two in the hour before (minutes 50 and 61), wherever an hour's window might have started: a fixed window
      // that began at minute 0 would let this one through, the limit's third within twelve minutes.
      at(62);
      const again = await withdraw();
      expect(again.statusCode).toBe(429);
      expect(Number(again.headers['retry-after'])).toBeGreaterThanOrEqual(48 * 60 - 1);
      expect(Number(again.headers['retry-after'])).toBeLessThanOrEqual(48 * 60 + 1);
      expect(await h.balanceOf(w.id)).toMatchObject({ available: '7.000000', pending: '0.000000' });
    } finally {
      h.ctx.withdrawalLimit = before.limit;
      h.ctx.now = before.now;
    }
  });

  it('refuses more than the available balance with 402 and sends nothing', async () => {
    const address = fresh();
    const w = await h.fundedWallet('5', 'user', address);
    await h.db.transaction().execute((trx) => createHold(trx, w.id, new Dec('2'), null, { now: new Date() }));
    const res = await post(`/api/v1/wallet/${w.id}/withdraw`, { amount: '3.000001' });
    expect(res.statusCode).toBe(402);
    expect(res.json()).toMatchObject({ code: 'INSUFFICIENT_FUNDS', available: '3.000000', needed: '3.000001' });
    expect(await L.chain.tokenBalance(address)).toBe('0');
    const bad = await post(`/api/v1/wallet/${w.id}/withdraw`, { amount: '0' });
    expect(bad.statusCode).toBe(400);
    const missing = await post(`/api/v1/wallet/${crypto.randomUUID()}/withdraw`, { amount: '1' });
    expect(missing.statusCode).toBe(404);
    expect(missing.json().code).toBe('WALLET_NOT_FOUND');
  });

  it('refuses destinations that cannot own tokens (programs, the system address, token accounts) with 400', async () => {
    const w = await h.fundedWallet('10', 'user', fresh());
    const { getAssociatedTokenAddressSync, TOKEN_PROGRAM_ID } = await import('@solana/spl-token');
    const holder = await L.user(1n);
    const unfit: [string, string][] = [
      [TOKEN_PROGRAM_ID.toBase58(), 'program'],
      ['11111111111111111111111111111111', 'system_address'],
      ['SysvarC1ock11111111111111111111111111111111', 'program'],
      [L.mint.toBase58(), 'platform_address'], // the platform's own mint (platform-destinations.test.ts)
      [getAssociatedTokenAddressSync(L.mint, holder.publicKey).toBase58(), 'token_account'],
    ];
    const asHolder = await h.holderHeaders(w);
    for (const [destination, reason] of unfit) {
      const res = await post(`/api/v1/wallet/${w.id}/withdraw`, { amount: '1', destination }, asHolder);
      expect(res.statusCode, destination).toBe(400);
      expect(res.json()).toMatchObject({ code: 'INVALID_DESTINATION', reason });
      expect(res.json().errors[0].path).toBe('body.destination');
    }
    // Nothing left the wallet; the holder of that token account is paid at its owner address.
    expect(await h.balanceOf(w.id)).toMatchObject({ available: '10.000000', pending: '0.000000' });
    const ok = await post(
      `/api/v1/wallet/${w.id}/withdraw`,
      { amount: '1', destination: holder.publicKey.toBase58() },
      asHolder,
    );
    expect(ok.statusCode, ok.body).toBe(200);
    expect(await L.chain.tokenBalance(holder.publicKey.toBase58())).toBe('2');
  });

  it('reverses the debit and answers 502 when the transfer fails on chain', async () => {
    // The treasury covers the withdrawal when billing checks; then its tokens leave behind billing's back, before the
    // signed transfer is sent: it is sent and fails on chain.
    const w = await h.fundedWallet('5', 'user', fresh());
    const chain = h.ctx.chain!;
    const elsewhere = await L.user(0n);
    let taken = 0n;
    h.ctx.chain = Object.assign(Object.create(chain) as Chain, {
      async prepareTransfer(destination: string, amount: string) {
        const prepared = await chain.prepareTransfer(destination, amount);
        const units = BigInt(
          new Dec(await chain.tokenBalance(chain.treasuryAddress())).times(L.unit.toString()).toFixed(),
        );
        taken = units - L.unit; // one token left of the five to send
        await L.transfer(L.treasury, elsewhere.publicKey, taken);
        return prepared;
      },
    });
    const res = await post(`/api/v1/wallet/${w.id}/withdraw`, { amount: '5' }).finally(() => {
      h.ctx.chain = chain;
    });
    await L.transfer(elsewhere, L.treasury.publicKey, taken);
    expect(res.statusCode, res.body).toBe(502);
    expect(res.headers['content-type']).toContain('application/problem+json');
    const problem = res.json();
    expect(problem).toMatchObject({ code: 'SOLANA_TRANSACTION_FAILED', transaction: { status: 'failed' } });
    expect(await h.balanceOf(w.id)).toMatchObject({ available: '5.000000', pending: '0.000000' });
    const transfers = await h.db
      .selectFrom('ledger_transfers')
      .select(['code', 'reverses_transfer_id'])
      .where('transaction_id', '=', problem.transaction_id)
      .orderBy('created_at')
      .execute();
    expect(transfers.map((t) => t.code)).toEqual(['withdrawal', 'withdrawal_reversal']);
    expect(transfers[1]!.reverses_transfer_id).not.toBeNull();
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('debits once for parallel retries with one Idempotency-Key and replays the answer', async () => {
    const address = fresh();
    const w = await h.fundedWallet('10', 'user', address);
    const key = crypto.randomUUID();
    const answers = await Promise.all(
      Array.from({ length: 5 }, () =>
        post(`/api/v1/wallet/${w.id}/withdraw`, { amount: '4' }, { 'idempotency-key': key }),
      ),
    );
    const ok = answers.filter((r) => r.statusCode === 200);
    expect(ok.length).toBeGreaterThanOrEqual(1);
    for (const r of answers) expect([200, 409]).toContain(r.statusCode);
    for (const r of answers.filter((x) => x.statusCode === 409))
      expect(r.json().code).toBe('IDEMPOTENCY_KEY_IN_PROGRESS');
    const replay = await post(`/api/v1/wallet/${w.id}/withdraw`, { amount: '4' }, { 'idempotency-key': key });
    expect(replay.statusCode).toBe(200);
    expect(replay.json().id).toBe(ok[0]!.json().id);
    const reused = await post(`/api/v1/wallet/${w.id}/withdraw`, { amount: '5' }, { 'idempotency-key': key });
    expect(reused.statusCode).toBe(409);
    expect(reused.json().code).toBe('IDEMPOTENCY_KEY_REUSED');
    expect(await L.chain.tokenBalance(address)).toBe('4');
    expect(await h.balanceOf(w.id)).toMatchObject({ available: '6.000000' });
  });

  it('answers a same-key retry that found the funds gone with the withdrawal that took them, never 402', async () => {
    // Each retry reads the balance before the first one's debit commits, or after it: one that reads it after finds
    // too little left (6 of 10 taken). Its refusal is not the key's answer: the key belongs to the withdrawal.
    const address = fresh();
    const w = await h.fundedWallet('10', 'user', address);
    const key = crypto.randomUUID();
    const answers = await Promise.all(
      Array.from({ length: 4 }, () =>
        post(`/api/v1/wallet/${w.id}/withdraw`, { amount: '6' }, { 'idempotency-key': key }),
      ),
    );
    const codes = answers.map((r) => `${r.statusCode} ${r.statusCode === 200 ? '' : r.json().code}`);
    for (const r of answers) expect([200, 409], codes.join(', ')).toContain(r.statusCode);
    for (const r of answers.filter((x) => x.statusCode === 409))
      expect(r.json().code).toBe('IDEMPOTENCY_KEY_IN_PROGRESS');
    const ids = new Set(answers.filter((r) => r.statusCode === 200).map((r) => r.json().id));
    expect(ids.size).toBe(1);
    const replay = await post(`/api/v1/wallet/${w.id}/withdraw`, { amount: '6' }, { 'idempotency-key': key });
    expect(replay.statusCode, replay.body).toBe(200);
    expect(ids.has(replay.json().id)).toBe(true);
    expect(await L.chain.tokenBalance(address)).toBe('6');
    expect(await h.balanceOf(w.id)).toMatchObject({ available: '4.000000' });
  });
});

describe('a withdrawal that is not final within the confirm timeout', () => {
  it('answers 202 pending and is confirmed later by reconciliation', async () => {
    const { SolanaChain } = await import('../src/adapters/solana-chain.ts');
    const impatient = await SolanaChain.connect({
      rpcUrl: L.conn.rpcEndpoint,
      mint: L.mint.toBase58(),
      treasuryKeypair: L.treasury,
      confirmTimeoutMs: 1500,
      pollIntervalMs: 100,
    });
    const harness = await setupBilling({ chain: impatient });
    try {
      const address = fresh();
      const w = await harness.fundedWallet('10', 'user', address);
      await localnetRpc('localnet_setFinalityDelay', [{ slots: 1_000_000, address }], net.rpcUrl);
      const res = await harness.app.inject({
        method: 'POST',
        url: `/api/v1/wallet/${w.id}/withdraw`,
        payload: { amount: '6' },
      });
      expect(res.statusCode, res.body).toBe(202);
      expect(res.json()).toMatchObject({ status: 'pending', amount: '6.000000' });
      expect(await harness.balanceOf(w.id)).toMatchObject({
        available: '4.000000',
        pending: '6.000000',
        total: '4.000000',
      });
      expect((await reconcilePending(harness.ctx)).waiting).toBe(1); // landed, not yet final: left alone

      await localnetRpc('localnet_finalize', [res.json().signature], net.rpcUrl);
      expect((await reconcilePending(harness.ctx)).confirmed).toBe(1);
      expect(await harness.balanceOf(w.id)).toMatchObject({ available: '4.000000', pending: '0.000000' });
      expect(await L.chain.tokenBalance(address)).toBe('6');
      expect((await harness.assertLedgerConsistent()).problems).toEqual([]);
    } finally {
      await harness.close();
    }
  });
});

describe('reconciliation of pending withdrawals after a crash', () => {
  async function intent(amount: string, accountFee?: string) {
    const address = fresh();
    const w = await h.fundedWallet('100', 'user', address);
    const prepared = await L.chain.prepareTransfer(address, amount, { accountFee });
    const row = await recordIntent(
      h.ctx,
      { wallet: w, type: 'withdrawal', amount: new Dec(amount), destination: address },
      prepared,
      null,
    );
    expect(await h.balanceOf(w.id)).toMatchObject({ pending: new Dec(amount).toFixed(6) });
    return { w, address, prepared, row };
  }

  it('re-sends a recorded transfer that never went out, and confirms it', async () => {
    const { w, address, row } = await intent('3');
    const summary = await reconcilePending(h.ctx);
    expect(summary.resent).toBeGreaterThanOrEqual(1);
    expect((await getTransaction(h.db, row.id))!.status).toBe('confirmed');
    expect(await L.chain.tokenBalance(address)).toBe('3');
    expect(await h.balanceOf(w.id)).toMatchObject({ available: '97.000000', pending: '0.000000' });
  });

  it('settles a recorded transfer that creates the token account with its fee: the rest sent, the fee kept', async () => {
    const before = await systemBalances();
    const { w, address, row } = await intent('3', '0.25');
    expect(row.fee).toBe('0.250000');
    await reconcilePending(h.ctx);
    expect((await getTransaction(h.db, row.id))!.status).toBe('confirmed');
    expect(await L.chain.tokenBalance(address)).toBe('2.75');
    expect(await h.balanceOf(w.id)).toMatchObject({ available: '97.000000', pending: '0.000000' });
    const after = await systemBalances();
    expect(after.platform_fees.minus(before.platform_fees).toFixed()).toBe('0.25');
    expect(after.chain_outgoing.minus(before.chain_outgoing).toFixed()).toBe('2.75');
  });

  it('confirms a transfer that landed before the crash without sending it again', async () => {
    const { w, address, prepared, row } = await intent('2.5');
    expect(await L.chain.sendAndConfirm(prepared)).toBe('finalized');
    await reconcilePending(h.ctx);
    expect((await getTransaction(h.db, row.id))!.status).toBe('confirmed');
    expect(await L.chain.tokenBalance(address)).toBe('2.5');
    await reconcilePending(h.ctx); // settling twice changes nothing
    expect(await h.balanceOf(w.id)).toMatchObject({ available: '97.500000', pending: '0.000000' });
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('reverses a transfer whose blockhash expired without landing, its token account fee with it', async () => {
    const { w, address, row } = await intent('4', '0.5');
    expect(row.fee).toBe('0.500000');
    await localnetRpc('localnet_warp', [400], net.rpcUrl); // past lastValidBlockHeight (150 blocks)
    await reconcilePending(h.ctx);
    const after = (await getTransaction(h.db, row.id))!;
    expect(after.status).toBe('failed');
    expect(after.failure_reason).toMatch(/expired/);
    expect(after.fee).toBe('0.000000');
    expect(await L.chain.tokenBalance(address)).toBe('0');
    expect(await h.balanceOf(w.id)).toMatchObject({ available: '100.000000', pending: '0.000000' });
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });
});

describe('provider earnings and payouts', () => {
  it('pays earnings out on chain above the minimum, less the token account fee once, and summarises them', async () => {
    h.ctx.tokenAccountFee = '0.5';
    onTestFinished(() => {
      h.ctx.tokenAccountFee = '0';
    });
    const providerId = crypto.randomUUID();
    const address = fresh();
    const created = await post('/api/v1/wallet', {
      owner_type: 'provider',
      owner_id: providerId,
      solana_address: address,
    });
    const providerWallet = created.json();
    // A renter's hold posted to the provider (what a finished rental session does).
    const renter = await h.fundedWallet('100');
    await h.db.transaction().execute(async (trx) => {
      const hold = await createHold(trx, renter.id, new Dec('30'), null, { now: new Date() });
      await postHold(
        trx,
        hold.id,
        [
          { to: { wallet: providerWallet.id, kind: 'available' }, amount: new Dec('23.75'), code: 'provider_earnings' },
          { to: { system: 'platform_fees' }, amount: new Dec('1.25'), code: 'platform_fee' },
        ],
        true,
        { now: new Date() },
      );
    });
    const earnings = await h.app.inject({ method: 'GET', url: `/api/v1/provider/${providerId}/earnings` });
    expect(earnings.json()).toMatchObject({
      total_earned: '23.750000',
      available_for_payout: '23.750000',
      total_paid_out: '0.000000',
      minimum_payout: '10.000000',
    });

    const small = await post(`/api/v1/provider/${providerId}/payout`, { amount: '9.999999' });
    expect(small.statusCode).toBe(400);
    expect(small.json().code).toBe('PAYOUT_BELOW_MINIMUM');

    const paid = await post(`/api/v1/provider/${providerId}/payout`, { amount: '15' });
    expect(paid.statusCode, paid.body).toBe(200);
    // The address had no token account: the payout made it and withheld its fee.
    expect(paid.json()).toMatchObject({ type: 'payout', status: 'confirmed', amount: '15.000000', fee: '0.500000' });
    expect(await L.chain.tokenBalance(address)).toBe('14.5');

    const rest = await post(`/api/v1/provider/${providerId}/payout`, {});
    expect(rest.statusCode).toBe(402); // 8.75 left: below the minimum
    const after = await h.app.inject({ method: 'GET', url: `/api/v1/provider/${providerId}/earnings` });
    expect(after.json()).toMatchObject({
      total_earned: '23.750000',
      total_paid_out: '15.000000',
      available_for_payout: '8.750000',
    });
    expect(
      (await h.app.inject({ method: 'GET', url: `/api/v1/provider/${crypto.randomUUID()}/earnings` })).statusCode,
    ).toBe(404);
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });
});
