import { type AppError, statusOf } from '@gpu/common';
import { sql, type Transaction } from 'kysely';
import { describe, expect, it } from 'vitest';
import type { BillingDB } from '../src/db/schema.ts';
import { createHold, extendHold, postHold, voidHold } from '../src/domain/ledger/holds.ts';
import { postTransfers } from '../src/domain/ledger/ledger.ts';
import { Dec } from '../src/domain/ledger/money.ts';
import { useBillingHarness } from './support/setup.ts';

/** A domain refusal as the HTTP layer would answer it: its status, code and extra members. */
const answered = <T>(p: Promise<T>) =>
  p.catch((e: AppError) => {
    throw { status: statusOf(e), code: e.code, extra: e.extra };
  });

const h = useBillingHarness();

const tx = <T>(fn: (trx: Transaction<BillingDB>) => Promise<T>) => h.db.transaction().execute(fn);

describe('double-entry ledger', () => {
  it('moves money between accounts and keeps balances equal to the sum of transfers', async () => {
    const a = await h.fundedWallet('100');
    const b = await h.fundedWallet('5.5');
    await tx((trx) =>
      postTransfers(trx, [
        {
          debit: { wallet: a.id, kind: 'available' },
          credit: { wallet: b.id, kind: 'available' },
          amount: new Dec('0.000001'),
          code: 'test',
        },
      ]),
    );
    expect(await h.balanceOf(a.id)).toMatchObject({ available: '99.999999', total: '99.999999' });
    expect(await h.balanceOf(b.id)).toMatchObject({ available: '5.500001', locked: '0.000000', pending: '0.000000' });
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('refuses an overdraft with 402 INSUFFICIENT_FUNDS and writes nothing', async () => {
    const a = await h.fundedWallet('1');
    const before = await h.db
      .selectFrom('ledger_transfers')
      .select(sql<number>`count(*)`.as('n'))
      .executeTakeFirstOrThrow();
    await expect(
      answered(
        tx((trx) =>
          postTransfers(trx, [
            {
              debit: { wallet: a.id, kind: 'available' },
              credit: { system: 'platform_fees' },
              amount: new Dec('1.000001'),
              code: 'x',
            },
          ]),
        ),
      ),
    ).rejects.toMatchObject({
      status: 402,
      code: 'INSUFFICIENT_FUNDS',
      extra: { wallet_id: a.id, available: '1.000000', needed: '1.000001' },
    });
    const after = await h.db
      .selectFrom('ledger_transfers')
      .select(sql<number>`count(*)`.as('n'))
      .executeTakeFirstOrThrow();
    expect(after.n).toBe(before.n);
    expect(await h.balanceOf(a.id)).toMatchObject({ available: '1.000000' });
  });

  it('enforces non-negative balances and immutable transfers in the database itself', async () => {
    const a = await h.fundedWallet('1');
    await expect(
      sql`UPDATE ledger_accounts SET balance = balance - 2, debits_total = debits_total + 2
           WHERE wallet_id = ${a.id} AND kind = 'available'`.execute(h.db),
    ).rejects.toThrow(/ledger_accounts_non_negative/);
    await expect(
      sql`UPDATE ledger_accounts SET balance = balance + 1 WHERE wallet_id = ${a.id}`.execute(h.db),
    ).rejects.toThrow(/ledger_accounts_balanced/);
    await expect(sql`UPDATE ledger_transfers SET amount = 1000`.execute(h.db)).rejects.toThrow(/immutable/);
    await expect(sql`DELETE FROM ledger_transfers`.execute(h.db)).rejects.toThrow(/immutable/);
  });

  it('never overdraws a wallet under many concurrent debits', async () => {
    const a = await h.fundedWallet('10');
    const attempts = 40;
    const results = await Promise.allSettled(
      Array.from({ length: attempts }, () =>
        tx((trx) => createHold(trx, a.id, new Dec('0.75'), null, { now: new Date() })),
      ),
    );
    const ok = results.filter((r) => r.status === 'fulfilled').length;
    const refused = results.filter(
      (r) => r.status === 'rejected' && (r.reason as { code?: string }).code === 'INSUFFICIENT_FUNDS',
    ).length;
    expect(ok).toBe(13); // 13 x 0.75 = 9.75 <= 10 < 14 x 0.75
    expect(refused).toBe(attempts - 13);
    expect(await h.balanceOf(a.id)).toMatchObject({ available: '0.250000', locked: '9.750000', total: '10.000000' });
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('does not deadlock when transfers cross between the same wallets in both directions', async () => {
    const a = await h.fundedWallet('1000');
    const b = await h.fundedWallet('1000');
    await Promise.all(
      Array.from({ length: 60 }, (_, i) => {
        const [from, to] = i % 2 ? [a, b] : [b, a];
        return tx((trx) =>
          postTransfers(trx, [
            {
              debit: { wallet: from.id, kind: 'available' },
              credit: { wallet: to.id, kind: 'available' },
              amount: new Dec('1'),
              code: 't',
            },
            {
              debit: { wallet: to.id, kind: 'available' },
              credit: { system: 'platform_fees' },
              amount: new Dec('0.01'),
              code: 'fee',
            },
          ]),
        );
      }),
    );
    const [ba, bb] = [await h.balanceOf(a.id), await h.balanceOf(b.id)];
    expect(new Dec(ba.available).plus(bb.available).toFixed()).toBe('1999.4');
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });
});

describe('holds (two-phase transfers)', () => {
  it('locks funds, posts part of them with the rest released, and records lock and release transactions', async () => {
    const renter = await h.fundedWallet('50');
    const provider = await h.fundedWallet('0', 'provider');
    const hold = await tx((trx) => createHold(trx, renter.id, new Dec('20'), 'session-1', { now: new Date() }));
    expect(hold).toMatchObject({ status: 'pending', amount: '20', remaining: '20' });
    expect(await h.balanceOf(renter.id)).toMatchObject({
      available: '30.000000',
      locked: '20.000000',
      total: '50.000000',
    });

    const extended = await tx((trx) => extendHold(trx, hold.id, new Dec('5'), { now: new Date() }));
    expect(extended).toMatchObject({ amount: '25', remaining: '25' });

    const captured = await tx((trx) =>
      postHold(
        trx,
        hold.id,
        [{ to: { wallet: provider.id, kind: 'available' }, amount: new Dec('3'), code: 'provider_earnings' }],
        false,
        { now: new Date() },
      ),
    );
    expect(captured).toMatchObject({ status: 'pending', posted: '3', remaining: '22' });

    const posted = await tx((trx) =>
      postHold(
        trx,
        hold.id,
        [
          { to: { wallet: provider.id, kind: 'available' }, amount: new Dec('9.5'), code: 'provider_earnings' },
          { to: { system: 'platform_fees' }, amount: new Dec('0.5'), code: 'platform_fee' },
        ],
        true,
        { now: new Date() },
      ),
    );
    expect(posted).toMatchObject({ status: 'posted', posted: '13', released: '12', remaining: '0' });
    expect(await h.balanceOf(renter.id)).toMatchObject({
      available: '37.000000',
      locked: '0.000000',
      total: '37.000000',
    });
    expect(await h.balanceOf(provider.id)).toMatchObject({ available: '12.500000' });

    const types = await h.db
      .selectFrom('transactions')
      .select(['type', 'amount'])
      .where('hold_id', '=', hold.id)
      .orderBy('created_at')
      .execute();
    expect(types.map((t) => `${t.type}:${new Dec(t.amount).toFixed()}`)).toEqual(['lock:20', 'lock:5', 'release:12']);
    await expect(answered(tx((trx) => voidHold(trx, hold.id, { now: new Date() })))).rejects.toMatchObject({
      status: 409,
      code: 'HOLD_NOT_PENDING',
    });
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('voids a hold, refuses posting more than is held, and refuses a hold larger than the available balance', async () => {
    const renter = await h.fundedWallet('10');
    const hold = await tx((trx) => createHold(trx, renter.id, new Dec('4'), null, { now: new Date() }));
    await expect(
      answered(
        tx((trx) =>
          postHold(trx, hold.id, [{ to: { system: 'platform_fees' }, amount: new Dec('4.000001'), code: 'x' }], true, {
            now: new Date(),
          }),
        ),
      ),
    ).rejects.toMatchObject({ status: 409, code: 'HOLD_AMOUNT_EXCEEDED' });
    const voided = await tx((trx) => voidHold(trx, hold.id, { now: new Date() }));
    expect(voided).toMatchObject({ status: 'voided', released: '4', remaining: '0' });
    expect(await h.balanceOf(renter.id)).toMatchObject({ available: '10.000000', locked: '0.000000' });
    await expect(
      answered(tx((trx) => createHold(trx, renter.id, new Dec('10.000001'), null, { now: new Date() }))),
    ).rejects.toMatchObject({
      status: 402,
      code: 'INSUFFICIENT_FUNDS',
    });
    await expect(
      answered(tx((trx) => createHold(trx, crypto.randomUUID(), new Dec('1'), null, { now: new Date() }))),
    ).rejects.toMatchObject({
      status: 404,
      code: 'WALLET_NOT_FOUND',
    });
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it("writes a step's records and the hold's row at the step's time (the domain's clock), not the process's", async () => {
    const renter = await h.fundedWallet('10');
    const made = new Date('2031-02-03T04:05:06.000Z');
    const extended = new Date('2031-02-03T05:00:00.000Z');
    const voided = new Date('2031-02-03T06:00:00.000Z');
    const hold = await tx((trx) => createHold(trx, renter.id, new Dec('2'), null, { now: made }));
    const row = () => h.db.selectFrom('holds').select(['created_at', 'updated_at']).where('id', '=', hold.id);
    expect(await row().executeTakeFirstOrThrow()).toEqual({ created_at: made, updated_at: made });
    await tx((trx) => extendHold(trx, hold.id, new Dec('1'), { now: extended }));
    expect(await row().executeTakeFirstOrThrow()).toEqual({ created_at: made, updated_at: extended });
    await tx((trx) => voidHold(trx, hold.id, { now: voided }));
    expect(await row().executeTakeFirstOrThrow()).toEqual({ created_at: made, updated_at: voided });
    const records = await h.db
      .selectFrom('transactions')
      .select(['type', 'created_at', 'updated_at', 'confirmed_at'])
      .where('hold_id', '=', hold.id)
      .orderBy('created_at')
      .execute();
    expect(records).toEqual([
      { type: 'lock', created_at: made, updated_at: made, confirmed_at: made },
      { type: 'lock', created_at: extended, updated_at: extended, confirmed_at: extended },
      { type: 'release', created_at: voided, updated_at: voided, confirmed_at: voided },
    ]);
  });
});

describe('scale', () => {
  it('refuses to post an amount finer than the token decimals instead of letting NUMERIC round it', async () => {
    const a = await h.fundedWallet('1');
    await expect(
      tx((trx) =>
        postTransfers(trx, [
          {
            debit: { wallet: a.id, kind: 'available' },
            credit: { system: 'platform_fees' },
            amount: new Dec('0.0000005'),
            code: 'x',
          },
        ]),
      ),
    ).rejects.toThrow(/at most 6 decimals/);
    expect(await h.balanceOf(a.id)).toMatchObject({ available: '1.000000' });
  });
});
