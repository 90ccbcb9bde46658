/** Queries on transaction records (the history users see). Every function takes the database or a transaction. */
import { lockName } from '@gpu/common';
import { type Insertable, type Kysely, type Selectable, sql, type Transaction } from 'kysely';
import type { KeysetPosition } from '../domain/keyset.ts';
import { cursorAt, olderThan } from './keyset-sql.ts';
import type { BillingDB, TransactionStatus, TransactionTable, TransactionType } from './schema.ts';

type Db = Kysely<BillingDB> | Transaction<BillingDB>;

export type TransactionRow = Selectable<TransactionTable>;

export async function getTransaction(db: Db, id: string): Promise<TransactionRow | undefined> {
  return db.selectFrom('transactions').selectAll().where('id', '=', id).executeTakeFirst();
}

/** Which of a wallet's transactions a list shows: types, statuses, creation time in [from, to). */
export interface TransactionFilter {
  type?: TransactionType[];
  status?: TransactionStatus[];
  from?: Date;
  to?: Date;
}

/** Up to `limit` of a wallet's transactions after `after`, newest first, each with its cursor time. */
export async function listWalletTransactions(
  db: Db,
  walletId: string,
  f: TransactionFilter,
  after: KeysetPosition | undefined,
  limit: number,
): Promise<(TransactionRow & { cursor_at: string })[]> {
  let query = db
    .selectFrom('transactions')
    .selectAll()
    .select(cursorAt('created_at').as('cursor_at'))
    .where('wallet_id', '=', walletId);
  if (f.type?.length) query = query.where('type', 'in', f.type);
  if (f.status?.length) query = query.where('status', 'in', f.status);
  if (f.from) query = query.where('created_at', '>=', f.from);
  if (f.to) query = query.where('created_at', '<', f.to);
  if (after) query = query.where(olderThan('created_at', after));
  return query.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(limit).execute();
}

/** The ID of a hold's `lock` record (written with the hold). */
export async function lockRecordIdOfHold(db: Db, holdId: string): Promise<string> {
  const row = await db
    .selectFrom('transactions')
    .select('id')
    .where('hold_id', '=', holdId)
    .where('type', '=', 'lock')
    .executeTakeFirstOrThrow();
  return row.id;
}

/**
 * When the wallet's `n`-th newest withdrawal made after `since` was made, or undefined when it made fewer (through the
 * partial index `transactions_withdrawals`).
 */
export async function nthWithdrawalSince(db: Db, walletId: string, since: Date, n: number): Promise<Date | undefined> {
  const row = await db
    .selectFrom('transactions')
    .select('created_at')
    .where('wallet_id', '=', walletId)
    .where('type', '=', 'withdrawal')
    .where('created_at', '>', since)
    .orderBy('created_at', 'desc')
    .offset(n - 1)
    .limit(1)
    .executeTakeFirst();
  return row?.created_at;
}

/** Holds the lock of the wallet's withdrawals until the transaction ends (one withdrawal counted at a time). */
export async function lockWithdrawals(trx: Transaction<BillingDB>, walletId: string): Promise<void> {
  await lockName(trx, `withdrawals:${walletId}`);
}

/** Writes transaction records in one statement. */
export async function insertTransactions(db: Db, records: Insertable<TransactionTable>[]): Promise<void> {
  await db.insertInto('transactions').values(records).execute();
}

/** A wallet's payouts: the sum confirmed and the sum still pending (decimal strings). */
export async function payoutTotals(db: Db, walletId: string): Promise<{ paid: string; pending: string }> {
  return db
    .selectFrom('transactions')
    .select([
      sql<string>`coalesce(sum(amount) FILTER (WHERE status = 'confirmed'), 0)`.as('paid'),
      sql<string>`coalesce(sum(amount) FILTER (WHERE status = 'pending'), 0)`.as('pending'),
    ])
    .where('wallet_id', '=', walletId)
    .where('type', '=', 'payout')
    .executeTakeFirstOrThrow();
}

/** The record that credited an on-chain signature, if any (signatures are unique across records). */
export async function findBySignature(db: Db, signature: string) {
  return db
    .selectFrom('transactions')
    .select(['id', 'wallet_id'])
    .where('signature', '=', signature)
    .executeTakeFirst();
}

/**
 * Settles a pending withdrawal or payout record: its status, failure reason and times. Undefined when it is not
 * pending (already settled: two instances never settle one record twice).
 */
export async function settlePending(
  trx: Db,
  id: string,
  outcome: 'confirmed' | 'failed',
  reason: string | null,
  now: Date,
): Promise<TransactionRow | undefined> {
  return trx
    .updateTable('transactions')
    .set({
      status: outcome,
      failure_reason: reason,
      updated_at: now,
      confirmed_at: outcome === 'confirmed' ? now : null,
      // A failed transfer withheld nothing: its token account fee goes with it.
      ...(outcome === 'failed' ? { fee: '0' } : {}),
    })
    .where('id', '=', id)
    .where('status', '=', 'pending')
    .returningAll()
    .executeTakeFirst();
}

/** Pending withdrawals and payouts created at or before `before`, oldest first (at most `limit`). */
export async function pendingChainPayouts(db: Db, before: Date, limit: number): Promise<TransactionRow[]> {
  return db
    .selectFrom('transactions')
    .selectAll()
    .where('status', '=', 'pending')
    .where('type', 'in', ['withdrawal', 'payout'])
    .where('created_at', '<=', before)
    .orderBy('created_at')
    .limit(limit)
    .execute();
}
