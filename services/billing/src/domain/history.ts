/**
 * Transaction history of a wallet, newest first, with keyset pagination: the
 * cursor encodes the last row's (created_at, id) at full microsecond
 * precision, so pages never skip or repeat rows while new ones arrive.
 */
import { type Kysely, sql } from 'kysely';
import type { BillingDB, TransactionStatus, TransactionType } from '../db/schema.ts';
import { decodeCursor, encodeCursor } from './cursor.ts';
import { type TransactionJson, type TransactionRow, transactionJson } from './transactions.ts';

export interface HistoryQuery {
  limit: number;
  cursor?: string;
  type?: TransactionType[];
  status?: TransactionStatus[];
  from?: Date;
  to?: Date;
}

export interface HistoryPage {
  transactions: TransactionJson[];
  next_cursor: string | null;
}

/** One page of a wallet's transactions, filtered by type, status and creation time [from, to). */
export async function listTransactions(
  db: Kysely<BillingDB>,
  walletId: string,
  q: HistoryQuery,
  scale: number,
): Promise<HistoryPage> {
  let query = db
    .selectFrom('transactions')
    .selectAll()
    .select(sql<string>`to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`.as('cursor_at'))
    .where('wallet_id', '=', walletId);
  if (q.type?.length) query = query.where('type', 'in', q.type);
  if (q.status?.length) query = query.where('status', 'in', q.status);
  if (q.from) query = query.where('created_at', '>=', q.from);
  if (q.to) query = query.where('created_at', '<', q.to);
  if (q.cursor) {
    const c = decodeCursor(q.cursor);
    query = query.where(sql<boolean>`(created_at, id) < (${c.at}::timestamptz, ${c.id}::uuid)`);
  }
  const rows = await query
    .orderBy('created_at', 'desc')
    .orderBy('id', 'desc')
    .limit(q.limit + 1)
    .execute();
  const page = rows.slice(0, q.limit);
  const last = page.at(-1);
  return {
    transactions: page.map((r) => transactionJson(r as TransactionRow, scale)),
    next_cursor: rows.length > q.limit && last ? encodeCursor({ at: last.cursor_at, id: last.id }) : null,
  };
}
