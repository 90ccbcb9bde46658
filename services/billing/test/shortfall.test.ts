/**
 * A shortfall stops money, against the real local chain and PostgreSQL: a withdrawal or payout (asked for or
 * automatic) that the treasury cannot cover together with what the ledger owes everyone else is refused before
 * anything is debited (503 RESERVES_INSUFFICIENT, the same to a retry with its Idempotency-Key); a payout in flight
 * still counts as owed until its transfer has left the treasury, so a second withdrawal checking while the first has
 * not moved its tokens cannot pass on them; the background reserve check pauses withdrawals and payouts (503
 * PAYOUTS_PAUSED, the metric, the reserves report, the health answer) until an operator resumes them, audited; and an
 * admin's check updates the metrics at once.
 */
import { NoopPublisher } from '@gpu/common';
import { Keypair } from '@solana/web3.js';
import { describe, expect, it } from 'vitest';
import { startBackground } from '../src/background.ts';
import type { Chain, PreparedTransfer } from '../src/domain/chain/chain.ts';
import { Dec } from '../src/domain/ledger/money.ts';
import { readReserves } from '../src/domain/reserves/reserves.ts';
import { payOutEarnings } from '../src/domain/wallets/auto-payout.ts';
import { type Localnet, setupLocalnet } from './support/localnet.ts';
import { type BillingHarness, type SetupOptions, setupBilling } from './support/setup.ts';

const fresh = () => Keypair.generate().publicKey.toBase58();

/** Polls `read` until `done` holds of its value (a generous deadline: a loaded machine is slow, never wrong). */
async function eventually<T>(read: () => Promise<T>, done: (value: T) => boolean, ms = 30_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await read();
    if (done(value) || Date.now() > deadline) return value;
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * A chain whose steps can be held: the real local chain, with `hold` naming a step that waits until released (to
 * stop a withdrawal between its debit and its transfer, or between its checks and its debit).
 */
function holdable(chain: Chain) {
  let gate: { step: 'prepare' | 'send'; reached: () => void; released: Promise<void> } | null = null;
  const wrapped = Object.create(chain) as Chain;
  const pass = async (step: 'prepare' | 'send') => {
    const g = gate;
    if (g?.step !== step) return;
    gate = null;
    g.reached();
    await g.released;
  };
  wrapped.prepareTransfer = async (destination: string, amount: string) => {
    await pass('prepare');
    return chain.prepareTransfer(destination, amount);
  };
  wrapped.sendAndConfirm = async (prepared: PreparedTransfer) => {
    await pass('send');
    return chain.sendAndConfirm(prepared);
  };
  return {
    chain: wrapped,
    /** The next call of `step` waits: `reached` resolves when it does, `release()` lets it go on. */
    hold(step: 'prepare' | 'send') {
      const { promise: released, resolve: release } = Promise.withResolvers<void>();
      const { promise: arrived, resolve: reached } = Promise.withResolvers<void>();
      gate = { step, reached, released };
      return { reached: arrived, release };
    },
  };
}

interface Platform {
  L: Localnet;
  h: BillingHarness;
  gate: ReturnType<typeof holdable>;
  /**
   * Makes the treasury hold exactly what the ledger owes (wallets funded in tests are credited without tokens, and the
   * set-up minted a million to the treasury), as deposits and payouts keep it: the rest goes to an outside address.
   */
  cover(): Promise<void>;
  /** Moves tokens out of the treasury behind the ledger's back; `refill` puts them back. */
  drain(tokens: bigint): Promise<void>;
  refill(): Promise<void>;
}

/** A fresh treasury on the local chain, and billing on it. */
async function platform(opts: SetupOptions = {}): Promise<Platform> {
  const L = await setupLocalnet(6);
  const gate = holdable(L.chain);
  const h = await setupBilling({ ...opts, chain: gate.chain });
  const [outside, thief] = await Promise.all([L.user(0n), L.user(0n)]);
  let taken = 0n;
  return {
    L,
    h,
    gate,
    async cover() {
      const { treasury_balance, required } = await readReserves(h.ctx);
      const surplus = BigInt(new Dec(treasury_balance).minus(required).times(L.unit.toString()).toFixed());
      if (surplus > 0n) await L.transfer(L.treasury, outside.publicKey, surplus);
    },
    async drain(tokens) {
      await L.transfer(L.treasury, thief.publicKey, tokens * L.unit);
      taken += tokens;
    },
    async refill() {
      await L.transfer(thief, L.treasury.publicKey, taken * L.unit);
      taken = 0n;
    },
  };
}

const withdraw = (h: BillingHarness, walletId: string, amount: string, headers: Record<string, string> = {}) =>
  h.app.inject({ method: 'POST', url: `/api/v1/wallet/${walletId}/withdraw`, payload: { amount }, headers });

/** What a wallet's owner and the ledger show of it: balances, transactions, holds, ledger entries. */
async function traces(h: BillingHarness, walletId: string) {
  const transactions = await h.db.selectFrom('transactions').select('type').where('wallet_id', '=', walletId).execute();
  const holds = await h.db.selectFrom('holds').select('id').where('wallet_id', '=', walletId).execute();
  return { balance: await h.balanceOf(walletId), transactions: transactions.map((t) => t.type), holds: holds.length };
}

const metric = async (h: BillingHarness, name: string) => {
  const body = (await h.app.inject({ url: '/metrics' })).body;
  const line = body.split('\n').find((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.split(' ').at(-1));
};

describe('a treasury short of what the ledger owes', () => {
  it('refuses the next withdrawal and payout before anything moves, the same to a retry with its key', async () => {
    const { L, h, cover, drain } = await platform();
    try {
      const address = fresh();
      const w = await h.fundedWallet('110', 'user', address);
      // Covered to the last token: a withdrawal goes out.
      await cover();
      const first = await withdraw(h, w.id, '10');
      expect(first.statusCode, first.body).toBe(200);

      // Drained to a reserve ratio of 0.52.
      await drain(48n);
      const before = await traces(h, w.id);
      const key = crypto.randomUUID();
      const refused = await withdraw(h, w.id, '10', { 'idempotency-key': key });
      expect(refused.statusCode, refused.body).toBe(503);
      expect(refused.headers['content-type']).toContain('application/problem+json');
      expect(refused.headers['retry-after']).toBe('60');
      expect(refused.json()).toMatchObject({ code: 'RESERVES_INSUFFICIENT' });
      // Nothing debited, held or recorded; nothing sent.
      expect(await traces(h, w.id)).toEqual(before);
      expect(await L.chain.tokenBalance(address)).toBe('10');
      // The same answer again with the same key: the key was not taken by the refusal.
      const retried = await withdraw(h, w.id, '10', { 'idempotency-key': key });
      expect(retried.statusCode).toBe(503);
      expect(retried.json().code).toBe('RESERVES_INSUFFICIENT');
      expect(retried.headers['idempotent-replayed']).toBeUndefined();

      // A provider's payout, asked for and automatic, the same.
      const machine = crypto.randomUUID();
      const provider = await h.fundedWallet('50', 'provider', fresh(), { ownerId: machine });
      const payout = await h.app.inject({
        method: 'POST',
        url: `/api/v1/provider/${machine}/payout`,
        payload: { amount: '20' },
      });
      expect(payout.statusCode, payout.body).toBe(503);
      expect(payout.json().code).toBe('RESERVES_INSUFFICIENT');
      await h.db
        .updateTable('wallets')
        .set({ auto_payout_to: provider.solanaAddress })
        .where('id', '=', provider.id)
        .execute();
      await expect(payOutEarnings(h.ctx, provider.id)).rejects.toMatchObject({ code: 'RESERVES_INSUFFICIENT' });
      expect((await traces(h, provider.id)).transactions).toEqual([]);
      // Not the wallet's fault: no backoff is counted against its automatic payouts.
      const row = await h.db.selectFrom('wallets').selectAll().where('id', '=', provider.id).executeTakeFirstOrThrow();
      expect(row.auto_payout_failures).toBe(0);
      expect((await h.assertLedgerConsistent()).problems).toEqual([]);
    } finally {
      await h.close();
    }
  });

  it('counts a payout in flight as owed until its tokens left: a second withdrawal cannot pass on them', async () => {
    const { h, gate, cover, drain } = await platform();
    try {
      const a = await h.fundedWallet('300', 'user');
      const b = await h.fundedWallet('300', 'user');
      await cover();
      // a's withdrawal is debited and recorded, and held before its transfer is sent: it checked the reserves and
      // has not moved any money yet.
      const held = gate.hold('send');
      const first = withdraw(h, a.id, '300');
      await held.reached;
      // Meanwhile 100 tokens leave the treasury behind the ledger's back.
      await drain(100n);
      // b checks now: the treasury still holds a's 300, which are a's, not b's.
      const second = await withdraw(h, b.id, '300');
      expect(second.statusCode, second.body).toBe(503);
      expect(second.json().code).toBe('RESERVES_INSUFFICIENT');
      expect(await traces(h, b.id)).toMatchObject({ balance: { available: '300.000000' }, transactions: [] });
      held.release();
      expect((await first).statusCode).toBe(200);
      const report = (await h.app.inject({ url: '/api/v1/billing/reserves' })).json();
      expect(report).toMatchObject({ covered: false, gap: '100.000000', in_flight: '0.000000' });
    } finally {
      await h.close();
    }
  });

  it('lets concurrent withdrawals through while covered and refuses them all a token short', async () => {
    const { h, cover, drain } = await platform();
    try {
      const wallets = await Promise.all(Array.from({ length: 6 }, () => h.fundedWallet('50', 'user')));
      await cover();
      const answers = await Promise.all(wallets.slice(0, 3).map((w) => withdraw(h, w.id, '50')));
      expect(answers.map((a) => a.statusCode)).toEqual([200, 200, 200]);
      expect((await h.app.inject({ url: '/api/v1/billing/reserves' })).json()).toMatchObject({ covered: true });

      await drain(1n);
      const refused = await Promise.all(wallets.slice(3).map((w) => withdraw(h, w.id, '50')));
      expect(refused.map((a) => a.json().code)).toEqual([
        'RESERVES_INSUFFICIENT',
        'RESERVES_INSUFFICIENT',
        'RESERVES_INSUFFICIENT',
      ]);
      for (const w of wallets.slice(3)) expect((await h.balanceOf(w.id)).available).toBe('50.000000');
      expect((await h.assertLedgerConsistent()).problems).toEqual([]);
    } finally {
      await h.close();
    }
  });
});

describe('the pause', () => {
  it('follows a shortfall the background check finds, and lasts until an operator resumes payouts', async () => {
    const { h, cover, drain, refill } = await platform({ config: { billing: { reserve_check_interval: '200ms' } } });
    const w = await h.fundedWallet('100', 'user');
    await cover();
    const background = await startBackground(h.ctx, h.config, new NoopPublisher(), undefined, null);
    try {
      const health = async () => (await h.app.inject({ url: '/health' })).json().checks.payouts;
      expect(await health()).toEqual({ status: 'UP' });
      expect(await metric(h, 'billing_payouts_paused')).toBe(0);

      await drain(48n);
      const paused = await eventually(health, (c) => c.detail !== undefined);
      expect(paused).toMatchObject({ status: 'UP', detail: expect.stringContaining('paused since') });
      expect(await metric(h, 'billing_payouts_paused')).toBe(1);
      expect(await metric(h, 'billing_reserve_ratio')).toBeLessThan(0.53);
      const report = (await h.app.inject({ url: '/api/v1/billing/reserves' })).json();
      expect(report.payouts_paused).toMatchObject({ cause: 'reserve_shortfall', paused_by: null });
      expect(report.payouts_paused.details).toMatchObject({ gap: report.gap });

      const refused = await withdraw(h, w.id, '5');
      expect(refused.statusCode, refused.body).toBe(503);
      expect(refused.json()).toMatchObject({ code: 'PAYOUTS_PAUSED', cause: 'reserve_shortfall' });
      expect(await traces(h, w.id)).toMatchObject({ balance: { available: '100.000000' }, transactions: [] });

      // Resuming waits for the treasury; once covered again, the pause stays until an operator ends it.
      const early = await h.app.inject({
        method: 'POST',
        url: '/api/v1/billing/reserves/resume',
        payload: { reason: 'looks fine' },
      });
      expect(early.statusCode, early.body).toBe(409);
      expect(early.json()).toMatchObject({ code: 'RESERVES_NOT_COVERED', gap: report.gap });
      await refill();
      await eventually(
        async () => (await h.app.inject({ url: '/api/v1/billing/reserves' })).json(),
        (r) => r.covered,
      );
      expect((await withdraw(h, w.id, '5')).json().code).toBe('PAYOUTS_PAUSED');
      const renter = await h.issuer.user(['renter']);
      const stranger = await h.app.inject({
        method: 'POST',
        url: '/api/v1/billing/reserves/resume',
        headers: renter.headers,
        payload: { reason: 'me' },
      });
      expect(stranger.statusCode).toBe(403);
      const resumed = await h.app.inject({
        method: 'POST',
        url: '/api/v1/billing/reserves/resume',
        headers: { 'x-request-id': 'req-resume-1' },
        payload: { reason: 'treasury refilled from cold storage' },
      });
      expect(resumed.statusCode, resumed.body).toBe(200);
      expect(resumed.json().ended).toMatchObject({ cause: 'reserve_shortfall' });
      expect(await health()).toEqual({ status: 'UP' });
      expect((await withdraw(h, w.id, '5')).statusCode).toBe(200);

      // Who paused (the check, no one) and who resumed, and why, are in the audit trail.
      const audit = await eventually(
        async () => (await h.app.inject({ url: '/api/v1/billing/audit?target=payouts' })).json(),
        (events: unknown[]) => events.length >= 1,
      );
      expect(audit).toMatchObject([{ action: 'payouts_paused', actor_id: null, details: { gap: report.gap } }]);
      const resumes = await eventually(
        async (): Promise<{ outcome: string; actor_id: string }[]> =>
          (await h.app.inject({ url: '/api/v1/billing/audit?action=payouts_resumed' })).json(),
        // The admin's two requests, each written before it was handled, and the three answers (the renter's refused
        // by the access check, before any handler).
        (events) => events.length >= 5,
      );
      expect(resumes.filter((e) => e.outcome === 'requested')).toHaveLength(2);
      // Each answer's event is appended as its response closes: requests in a row may land in any order.
      const rank = (e: { outcome: string; actor_id: string }) =>
        e.actor_id === renter.id ? 0 : e.outcome === 'refused' ? 1 : 2;
      const answers = resumes.filter((e) => e.outcome !== 'requested').sort((a, b) => rank(a) - rank(b));
      expect(answers).toMatchObject([
        { outcome: 'refused', actor_id: renter.id },
        { outcome: 'refused', actor_id: h.admin.id, details: { code: 'RESERVES_NOT_COVERED' } },
        {
          outcome: 'succeeded',
          actor_id: h.admin.id,
          request_id: 'req-resume-1',
          details: { reason: 'treasury refilled from cold storage' },
        },
      ]);
    } finally {
      await background.stop();
      await h.close();
    }
  });

  it('stops a withdrawal that passed its checks before the pause committed, at its debit', async () => {
    const { L, h, gate, cover } = await platform();
    try {
      const address = fresh();
      const w = await h.fundedWallet('30', 'user', address);
      await cover();
      const held = gate.hold('prepare');
      const pending = withdraw(h, w.id, '10');
      await held.reached;
      const pause = await h.app.inject({
        method: 'POST',
        url: '/api/v1/billing/reserves/pause',
        payload: { reason: 'treasury key may have leaked' },
      });
      expect(pause.statusCode, pause.body).toBe(200);
      expect(pause.json()).toMatchObject({ cause: 'operator', paused_by: h.admin.id });
      held.release();
      const answer = await pending;
      expect(answer.statusCode, answer.body).toBe(503);
      expect(answer.json().code).toBe('PAYOUTS_PAUSED');
      expect(await traces(h, w.id)).toMatchObject({ balance: { available: '30.000000' }, transactions: [] });
      expect(await L.chain.tokenBalance(address)).toBe('0');
    } finally {
      await h.close();
    }
  });

  it('shows when its checks began before the first, and no SOL balance it could not read', async () => {
    const L = await setupLocalnet(6);
    const chain = Object.create(L.chain) as Chain;
    chain.treasurySol = () => Promise.reject(new Error('the RPC node did not answer'));
    const before = Date.now() / 1000;
    const h = await setupBilling({ chain });
    try {
      // No check yet: the stale-check alert counts from when this instance began checking, not from never.
      const began = await metric(h, 'billing_reserve_check_timestamp_seconds');
      expect(began).toBeGreaterThanOrEqual(Math.floor(before));
      expect(began).toBeLessThanOrEqual(Date.now() / 1000);
      const check = await h.app.inject({ url: '/api/v1/billing/reserves' });
      expect(check.statusCode, check.body).toBe(200);
      expect(check.json()).toMatchObject({ treasury_sol: null });
      expect(await metric(h, 'billing_reserve_check_timestamp_seconds')).toBe(
        Date.parse(check.json().checked_at) / 1000,
      );
      expect(await metric(h, 'billing_reserve_ratio')).toBeDefined();
      // Never read: absent, not 0 (which would raise TreasurySolLow as an empty treasury).
      expect(await metric(h, 'billing_treasury_sol')).toBeUndefined();
    } finally {
      await h.close();
    }
  });

  it("is shown by an admin's check in the metrics at once", async () => {
    const { h, cover, drain } = await platform();
    try {
      await h.fundedWallet('1000', 'user');
      await cover();
      expect(await metric(h, 'billing_reserve_ratio')).toBeUndefined();
      const check = await h.app.inject({ url: '/api/v1/billing/reserves' });
      expect(check.json()).toMatchObject({ ratio: '1.000000', covered: true, payouts_paused: null });
      expect(await metric(h, 'billing_reserve_ratio')).toBe(1);
      expect(await metric(h, 'billing_treasury_sol')).toBe(Number(check.json().treasury_sol));
      expect(Number(check.json().treasury_sol)).toBeGreaterThan(0);
      await drain(480n);
      const short = (await h.app.inject({ url: '/api/v1/billing/reserves' })).json();
      expect(short).toMatchObject({ ratio: '0.520000', covered: false, gap: '480.000000' });
      expect(await metric(h, 'billing_reserve_ratio')).toBe(0.52);
      expect(await metric(h, 'billing_reserve_gap_tokens')).toBe(480);
      // Found twice in a row by the check: paused.
      expect(short.payouts_paused).toMatchObject({ cause: 'reserve_shortfall' });
      expect(await metric(h, 'billing_payouts_paused')).toBe(1);
    } finally {
      await h.close();
    }
  });
});
