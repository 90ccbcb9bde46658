/** Queries on transaction records (the history users see). Every function takes the database or a transaction. */
import type { Kysely, Selectable, Transaction } from 'kysely';
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
