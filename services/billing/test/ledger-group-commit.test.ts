import { type AppError, statusOf } from '@gpu/common';
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { ledgerPostGroupsMigration } from '../src/db/migrations/0009-ledger-post-groups.ts';
import { newBillingState } from '../src/domain/context.ts';
import { type LedgerContext, postTransferGroup, transferGroupStats } from '../src/domain/ledger/group-commit.ts';
import { type AccountRef, postTransfers, type TransferSpec, transferRows } from '../src/domain/ledger/ledger.ts';
import { Dec } from '../src/domain/ledger/money.ts';
import { useBillingHarness } from './support/setup.ts';

const h = useBillingHarness();

/** A context of its own (its own batcher, so its own counts), on the harness's database. */
const freshContext = (): LedgerContext => ({ db: h.db, state: newBillingState() });

const available = (wallet: string): AccountRef => ({ wallet, kind: 'available' });
const move = (debit: AccountRef, credit: AccountRef, amount: string, code = 'test'): TransferSpec => ({
  debit,
  credit,
  amount: new Dec(amount),
  code,
});

/**
 * `n` new wallets, each funded with `funds` through group commit in `ctx`, their account IDs in its cache: groups
 * submitted at once afterwards need no query before they reach the batcher, so they reach it in the same turn and
 * share one batch.
 */
async function wallets(ctx: LedgerContext, n: number, funds: string): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const w = await h.fundedWallet('0');
    const credit = move({ system: 'chain_incoming' }, available(w.id), new Dec(funds).gt(0) ? funds : '1');
    await transferRows(ctx.db, [credit], ctx.state.accountIds);
    if (new Dec(funds).gt(0)) await postTransferGroup(ctx, [credit]);
    ids.push(w.id);
  }
  return ids;
}

/** A refusal as the HTTP layer would answer it: its status, code and extra members. */
const answered = (reason: unknown) => {
  const e = reason as AppError;
  return { status: statusOf(e), code: e.code, extra: e.extra };
};

const transfersCount = async () =>
  Number((await h.db.selectFrom('ledger_transfers').select(sql<number>`count(*)`.as('n')).executeTakeFirstOrThrow()).n);

describe('group commit of ledger transfers', () => {
  it('posts concurrent groups of many callers in fewer statements, each caller getting its own transfers', async () => {
    const ctx = freshContext();
    const ids = await wallets(ctx, 40, '40');
    const fees = { system: 'platform_fees' } as const;
    const before = transferGroupStats(ctx);
    const posted = await Promise.all(ids.map((w, i) => postTransferGroup(ctx, [move(available(w), fees, `${i + 1}`)])));
    const after = transferGroupStats(ctx);
    expect(after.items - before.items).toBe(40);
    expect(after.batches - before.batches).toBeLessThanOrEqual(2);

    const accounts = await h.db.selectFrom('ledger_accounts').select(['id', 'wallet_id', 'kind']).execute();
    const feesAccount = accounts.find((a) => a.kind === 'platform_fees')!.id;
    for (const [i, w] of ids.entries()) {
      const own = accounts.find((a) => a.wallet_id === w && a.kind === 'available')!.id;
      const [t] = posted[i]!;
      expect(t).toMatchObject({ debitAccountId: own, creditAccountId: feesAccount, amount: `${i + 1}` });
      const row = await h.db.selectFrom('ledger_transfers').selectAll().where('id', '=', t!.id).executeTakeFirst();
      expect(row).toMatchObject({ debit_account_id: own, credit_account_id: feesAccount, amount: `${i + 1}.000000` });
      expect((await h.balanceOf(w)).available).toBe(new Dec(39 - i).toFixed(6));
    }
  });

  it('refuses an overdrafting group with INSUFFICIENT_FUNDS naming its wallet while the rest of its batch posts', async () => {
    const ctx = freshContext();
    const [a, b, c] = await wallets(ctx, 3, '5');
    const fees = { system: 'platform_fees' } as const;
    const before = transferGroupStats(ctx).batches;
    const outcomes = await Promise.allSettled([
      postTransferGroup(ctx, [move(available(a!), fees, '2')]),
      postTransferGroup(ctx, [move(available(b!), fees, '5.000001')]),
      postTransferGroup(ctx, [move(available(c!), fees, '5')]),
    ]);
    expect(transferGroupStats(ctx).batches - before).toBe(1); // one batch: the refusal shared it with the others
    expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect(answered((outcomes[1] as PromiseRejectedResult).reason)).toEqual({
      status: 402,
      code: 'INSUFFICIENT_FUNDS',
      extra: { wallet_id: b, available: '5.000000', needed: '5.000001' },
    });
    expect(await h.balanceOf(a!)).toMatchObject({ available: '3.000000' });
    expect(await h.balanceOf(b!)).toMatchObject({ available: '5.000000' });
    expect(await h.balanceOf(c!)).toMatchObject({ available: '0.000000' });
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('posts a group all or nothing: a second leg that overdraws refuses the first', async () => {
    const ctx = freshContext();
    const [rich, poor, payee] = await wallets(ctx, 3, '1');
    const count = await transfersCount();
    await expect(
      postTransferGroup(ctx, [
        move(available(rich!), available(payee!), '1'),
        move(available(poor!), available(payee!), '1.5'),
      ]).catch((e) => Promise.reject(answered(e))),
    ).rejects.toMatchObject({ code: 'INSUFFICIENT_FUNDS', extra: { wallet_id: poor, needed: '1.500000' } });
    expect(await transfersCount()).toBe(count);
    expect(await h.balanceOf(rich!)).toMatchObject({ available: '1.000000' });
    expect(await h.balanceOf(payee!)).toMatchObject({ available: '1.000000' });
  });

  it('applies the groups of a batch in submission order', async () => {
    const ctx = freshContext();
    const [payer, middle, payee] = await wallets(ctx, 3, '0');
    await postTransferGroup(ctx, [move({ system: 'chain_incoming' }, available(payer!), '10')]);
    const before = transferGroupStats(ctx).batches;
    // `middle` has nothing but what the group before it in the same batch credits.
    const inOrder = await Promise.allSettled([
      postTransferGroup(ctx, [move(available(payer!), available(middle!), '3')]),
      postTransferGroup(ctx, [move(available(middle!), available(payee!), '2')]),
    ]);
    expect(inOrder.map((o) => o.status)).toEqual(['fulfilled', 'fulfilled']);
    // The other way round, the spending group comes first and finds too little.
    const reversed = await Promise.allSettled([
      postTransferGroup(ctx, [move(available(middle!), available(payee!), '2')]),
      postTransferGroup(ctx, [move(available(payer!), available(middle!), '3')]),
    ]);
    expect(transferGroupStats(ctx).batches - before).toBe(2);
    expect(reversed.map((o) => o.status)).toEqual(['rejected', 'fulfilled']);
    expect(answered((reversed[0] as PromiseRejectedResult).reason).extra).toEqual({
      wallet_id: middle,
      available: '1.000000',
      needed: '2.000000',
    });
    expect(await h.balanceOf(payer!)).toMatchObject({ available: '4.000000' });
    expect(await h.balanceOf(middle!)).toMatchObject({ available: '4.000000' });
    expect(await h.balanceOf(payee!)).toMatchObject({ available: '2.000000' });
  });

  it('applies a batch formed while another is in the database after it', async () => {
    const ctx = freshContext();
    const [payer, middle, payee] = await wallets(ctx, 3, '0');
    await postTransferGroup(ctx, [move({ system: 'chain_incoming' }, available(payer!), '10')]);
    const before = transferGroupStats(ctx).batches;
    const first = postTransferGroup(ctx, [move(available(payer!), available(middle!), '3')]);
    while (transferGroupStats(ctx).batches === before) await new Promise((resolve) => setImmediate(resolve));
    const second = postTransferGroup(ctx, [move(available(middle!), available(payee!), '3')]);
    expect((await Promise.allSettled([first, second])).map((o) => o.status)).toEqual(['fulfilled', 'fulfilled']);
    expect(transferGroupStats(ctx).batches - before).toBe(2);
    expect(await h.balanceOf(middle!)).toMatchObject({ available: '0.000000' });
    expect(await h.balanceOf(payee!)).toMatchObject({ available: '3.000000' });
  });

  it('refuses a group with amounts finer than the scale on its own', async () => {
    const ctx = freshContext();
    const [a, b] = await wallets(ctx, 2, '1');
    const fees = { system: 'platform_fees' } as const;
    const outcomes = await Promise.allSettled([
      postTransferGroup(ctx, [move(available(a!), fees, '0.5'), move(available(a!), fees, '0.0000001')]),
      postTransferGroup(ctx, [move(available(b!), fees, '0.5')]),
    ]);
    expect(outcomes.map((o) => o.status)).toEqual(['rejected', 'fulfilled']);
    expect((outcomes[0] as PromiseRejectedResult).reason.message).toMatch(/ledger refused the amounts.*6 decimals/);
    expect(await h.balanceOf(a!)).toMatchObject({ available: '1.000000' });
    expect(await h.balanceOf(b!)).toMatchObject({ available: '0.500000' });
  });

  it('fails only the group whose statement error it causes: the batch is posted again group by group', async () => {
    const ctx = freshContext();
    const [a, b, c] = await wallets(ctx, 3, '5');
    const fees = { system: 'platform_fees' } as const;
    // A real failure inside the statement: a trigger that refuses one row (as a lost connection would end it).
    await sql`CREATE FUNCTION test_refuse_transfer() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'statement failed for the test'; END $$`.execute(h.db);
    await sql`CREATE TRIGGER test_refuse_transfer BEFORE INSERT ON ledger_transfers FOR EACH ROW
      WHEN (NEW.code = 'refused_by_trigger') EXECUTE FUNCTION test_refuse_transfer()`.execute(h.db);
    try {
      const count = await transfersCount();
      const before = transferGroupStats(ctx).batches;
      const outcomes = await Promise.allSettled([
        postTransferGroup(ctx, [move(available(a!), fees, '1')]),
        postTransferGroup(ctx, [move(available(b!), fees, '1', 'refused_by_trigger')]),
        postTransferGroup(ctx, [move(available(c!), fees, '1')]),
      ]);
      expect(transferGroupStats(ctx).batches - before).toBe(1); // the three shared one batch
      expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
      expect((outcomes[1] as PromiseRejectedResult).reason.message).toMatch(/statement failed for the test/);
      expect(await transfersCount()).toBe(count + 2);
      expect(await h.balanceOf(a!)).toMatchObject({ available: '4.000000' });
      expect(await h.balanceOf(b!)).toMatchObject({ available: '5.000000' });
      expect(await h.balanceOf(c!)).toMatchObject({ available: '4.000000' });
      expect((await h.assertLedgerConsistent()).problems).toEqual([]);
    } finally {
      await sql`DROP TRIGGER test_refuse_transfer ON ledger_transfers`.execute(h.db);
      await sql`DROP FUNCTION test_refuse_transfer()`.execute(h.db);
    }
    // The batcher goes on after a failed batch.
    await postTransferGroup(ctx, [move(available(a!), fees, '1')]);
    expect(await h.balanceOf(a!)).toMatchObject({ available: '3.000000' });
  });

  it('fails every caller of a batch whose connection is lost, writes nothing of it, and goes on', async () => {
    const ctx = freshContext();
    const [a, b] = await wallets(ctx, 2, '5');
    const fees = { system: 'platform_fees' } as const;
    // The statement's own backend is terminated halfway through it: the connection is gone, as in a network failure.
    await sql`CREATE FUNCTION test_lose_connection() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NEW; END $$`.execute(h.db);
    await sql`CREATE TRIGGER test_lose_connection BEFORE INSERT ON ledger_transfers FOR EACH ROW
      WHEN (NEW.code = 'connection_lost') EXECUTE FUNCTION test_lose_connection()`.execute(h.db);
    try {
      const count = await transfersCount();
      const outcomes = await Promise.allSettled([
        postTransferGroup(ctx, [move(available(a!), fees, '1')]),
        postTransferGroup(ctx, [move(available(b!), fees, '1', 'connection_lost')]),
      ]);
      expect(outcomes.map((o) => o.status)).toEqual(['rejected', 'rejected']);
      for (const o of outcomes) expect(String((o as PromiseRejectedResult).reason)).toMatch(/terminat/i);
      // The pool drops the dead connection once its socket has closed, a moment after the error arrived (later on a
      // busy machine): the first read may still be handed it, so read until a connection answers.
      const deadline = Date.now() + 20_000;
      let after: number | undefined;
      while (after === undefined) {
        try {
          after = await transfersCount();
        } catch (err) {
          if (Date.now() > deadline) throw err;
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
      }
      expect(after).toBe(count);
      for (const w of [a!, b!]) expect(await h.balanceOf(w)).toMatchObject({ available: '5.000000' });
    } finally {
      await sql`DROP TRIGGER test_lose_connection ON ledger_transfers`.execute(h.db);
      await sql`DROP FUNCTION test_lose_connection()`.execute(h.db);
    }
    await Promise.all([a!, b!].map((w) => postTransferGroup(ctx, [move(available(w), fees, '1')])));
    for (const w of [a!, b!]) expect(await h.balanceOf(w)).toMatchObject({ available: '4.000000' });
  });

  it("gives up on a batch stuck behind another transaction's lock (lock_timeout), writing nothing, and goes on", {
    timeout: 30_000,
  }, async () => {
    const ctx = freshContext();
    const [a, b] = await wallets(ctx, 2, '5');
    const fees = { system: 'platform_fees' } as const;
    const count = await transfersCount();
    const { promise: unlocked, resolve: unlock } = Promise.withResolvers<void>();
    const { promise: isLocked, resolve: locked } = Promise.withResolvers<void>();
    // Another transaction holds a's accounts and does not finish.
    const holder = h.db.transaction().execute(async (trx) => {
      await sql`SELECT id FROM ledger_accounts WHERE wallet_id = ${a!} FOR UPDATE`.execute(trx);
      locked();
      await unlocked;
    });
    await isLocked;
    const started = Date.now();
    try {
      const outcomes = await Promise.allSettled([
        postTransferGroup(ctx, [move(available(a!), fees, '1')]),
        postTransferGroup(ctx, [move(available(b!), fees, '1')]),
      ]);
      expect(outcomes.map((o) => o.status)).toEqual(['rejected', 'rejected']);
      expect((outcomes[0] as PromiseRejectedResult).reason).toMatchObject({ code: '55P03' });
      expect(Date.now() - started).toBeLessThan(15_000);
      expect(await transfersCount()).toBe(count);
    } finally {
      unlock();
      await holder;
    }
    await postTransferGroup(ctx, [move(available(b!), fees, '1')]);
    expect(await h.balanceOf(b!)).toMatchObject({ available: '4.000000' });
  });

  it('keeps the ledger exact under many concurrent callers, beside transfers posted one statement each', async () => {
    const ctx = freshContext();
    const ids = await wallets(ctx, 12, '10');
    const expected = new Map(ids.map((w) => [w, new Dec(10)]));
    let refused = 0;
    let posted = 0;
    const before = transferGroupStats(ctx);
    // Random transfers of up to 4 between random wallets (some overdraw), half grouped in pairs, alongside
    // ungrouped `ledger_post` statements on the same accounts.
    const worker = async (n: number) => {
      for (let i = 0; i < 25; i++) {
        const pick = () => ids[Math.floor(Math.random() * ids.length)]!;
        const legs: [string, string, Dec][] = [];
        for (let k = 0; k < (i % 2) + 1; k++) {
          const from = pick();
          let to = pick();
          while (to === from) to = pick();
          legs.push([from, to, new Dec(Math.ceil(Math.random() * 400)).div(100)]);
        }
        const specs = legs.map(([from, to, amount]) => move(available(from), available(to), amount.toFixed()));
        try {
          if (n % 4 === 0) await postTransfers(h.db, specs, ctx.state.accountIds);
          else await postTransferGroup(ctx, specs);
          for (const [from, to, amount] of legs) {
            expected.set(from, expected.get(from)!.minus(amount));
            expected.set(to, expected.get(to)!.plus(amount));
          }
          posted++;
        } catch (err) {
          expect((err as AppError).code).toBe('INSUFFICIENT_FUNDS');
          refused++;
        }
      }
    };
    await Promise.all(Array.from({ length: 16 }, (_, n) => worker(n)));
    const after = transferGroupStats(ctx);
    expect(posted + refused).toBe(16 * 25);
    expect(posted).toBeGreaterThan(0);
    expect(after.batches - before.batches).toBeLessThan(after.items - before.items);
    for (const w of ids) {
      expect((await h.balanceOf(w)).available).toBe(expected.get(w)!.toFixed(6));
    }
    expect((await h.assertLedgerConsistent()).problems).toEqual([]);
  });

  it('has a migration whose down removes the function and whose up brings it back', async () => {
    const migration = ledgerPostGroupsMigration(6);
    const exists = async () =>
      (
        await sql<{ f: string | null }>`SELECT to_regprocedure(
          'ledger_post_groups(int[], uuid[], uuid[], uuid[], numeric[], text[], uuid[], uuid[], uuid[])')::text AS f`.execute(
          h.db,
        )
      ).rows[0]!.f;
    expect(await exists()).not.toBeNull();
    await migration.down!(h.db);
    expect(await exists()).toBeNull();
    await migration.up(h.db);
    const ctx = freshContext();
    const [w] = await wallets(ctx, 1, '2');
    expect(await h.balanceOf(w!)).toMatchObject({ available: '2.000000' });
  });
});
