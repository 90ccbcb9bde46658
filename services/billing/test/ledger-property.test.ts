/**
 * Property: whatever mix of operations runs concurrently (deposits, holds
 * posted in part or voided, withdrawals confirmed or failed), afterwards
 * every balance equals its transfers, no wallet account is negative, locked
 * equals what pending holds hold, and the money inside the platform equals
 * deposits minus what confirmed withdrawals and payouts sent (a token account
 * fee withheld from one stays inside, the platform's).
 */
import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createHold, type Hold, postHold, voidHold } from '../src/domain/ledger/holds.ts';
import { Dec } from '../src/domain/ledger/money.ts';
import { recordIntent, settle } from '../src/domain/wallets/payouts.ts';
import type { Wallet } from '../src/domain/wallets/wallets.ts';
import { useBillingHarness } from './support/setup.ts';

const h = useBillingHarness();

const amount = fc.integer({ min: 1, max: 5_000_000 }).map((micro) => new Dec(micro).div(1_000_000));

const op = fc.oneof(
  fc.record({ kind: fc.constant('deposit' as const), wallet: fc.nat(3), amount }),
  fc.record({
    kind: fc.constant('hold' as const),
    wallet: fc.nat(3),
    amount,
    post: fc.double({ min: 0, max: 1.2, noNaN: true }),
    close: fc.boolean(),
    void: fc.boolean(),
  }),
  fc.record({
    kind: fc.constant('withdraw' as const),
    wallet: fc.nat(3),
    amount,
    lands: fc.boolean(),
    payout: fc.boolean(),
    /** The share of the amount withheld as a token account fee (0: the destination had its account). */
    feeShare: fc.oneof(fc.constant(0), fc.double({ min: 0, max: 0.99, noNaN: true })),
  }),
);

let deposited = new Dec(0);
let sentOut = new Dec(0);

type Op = typeof op extends fc.Arbitrary<infer T> ? T : never;

async function run(o: Op, wallets: Wallet[], provider: Wallet): Promise<void> {
  const wallet = wallets[o.wallet % wallets.length]!;
  try {
    if (o.kind === 'deposit') {
      await h.credit(wallet.id, o.amount.toFixed(), 'deposit');
      deposited = deposited.plus(o.amount);
    } else if (o.kind === 'hold') {
      const hold: Hold = await h.db
        .transaction()
        .execute((trx) => createHold(trx, wallet.id, o.amount, null, { now: new Date() }));
      if (o.void) {
        await h.db.transaction().execute((trx) => voidHold(trx, hold.id, { now: new Date() }));
        return;
      }
      const cost = o.amount.mul(o.post).toDecimalPlaces(6);
      const fee = cost.mul('0.05').toDecimalPlaces(6);
      await h.db.transaction().execute((trx) =>
        postHold(
          trx,
          hold.id,
          [
            { to: { wallet: provider.id, kind: 'available' }, amount: cost.minus(fee), code: 'provider_earnings' },
            { to: { system: 'platform_fees' }, amount: fee, code: 'platform_fee' },
          ],
          o.close,
          { now: new Date() },
        ),
      );
    } else {
      const signature = randomBytes(48).toString('hex');
      const sent = o.amount.minus(o.amount.mul(o.feeShare).toDecimalPlaces(6, Dec.ROUND_DOWN));
      const row = await recordIntent(
        h.ctx,
        { wallet, type: o.payout ? 'payout' : 'withdrawal', amount: o.amount, destination: wallet.solanaAddress! },
        {
          signature,
          serialized: 'AA==',
          lastValidBlockHeight: 1,
          createsAccount: o.feeShare > 0,
          sent: sent.toFixed(),
        },
        null,
      );
      await settle(h.ctx, row.id, o.lands ? 'confirmed' : 'failed', o.lands ? null : 'test failure');
      if (o.lands) sentOut = sentOut.plus(sent);
    }
  } catch (err) {
    const code = (err as { code?: string }).code;
    if (code !== 'INSUFFICIENT_FUNDS' && code !== 'HOLD_AMOUNT_EXCEEDED') throw err;
  }
}

describe('ledger under random concurrent operations', () => {
  it('always balances, never goes negative and conserves money', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(op, { minLength: 5, maxLength: 40 }),
        fc.array(amount, { minLength: 4, maxLength: 4 }),
        async (ops, seed) => {
          const wallets = await Promise.all(seed.map(() => h.fundedWallet('0')));
          for (let i = 0; i < wallets.length; i++) {
            await h.credit(wallets[i]!.id, seed[i]!.toFixed(), 'deposit');
            deposited = deposited.plus(seed[i]!);
          }
          const provider = await h.fundedWallet('0', 'provider');
          await Promise.all(ops.map((o) => run(o, wallets, provider)));

          const { problems, accounts } = await h.assertLedgerConsistent();
          expect(problems).toEqual([]);
          const sum = (kinds: string[]) =>
            accounts.filter((a) => kinds.includes(a.kind)).reduce((s, a) => s.plus(a.balance), new Dec(0));
          const inside = sum(['available', 'locked', 'pending_out', 'platform_fees']);
          expect(inside.toFixed()).toBe(deposited.minus(sentOut).toFixed());
          expect(sum(['chain_incoming']).toFixed()).toBe(deposited.neg().toFixed());
          expect(sum(['chain_outgoing']).toFixed()).toBe(sentOut.toFixed());
          expect(sum(['pending_out']).toFixed()).toBe('0');
        },
      ),
      { numRuns: 12 },
    );
  });
});
