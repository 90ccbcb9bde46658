/**
 * Transaction history of a wallet, newest first, paged by keyset (keyset.ts):
 * pages never skip or repeat rows while new ones arrive.
 */
import type { Kysely } from 'kysely';
import type { BillingDB } from '../../db/schema.ts';
import {
  getTransaction,
  listWalletTransactions,
  type TransactionFilter,
  type TransactionRow,
} from '../../db/transaction-repository.ts';
import { type KeysetPosition, keysetPage, type Page } from '../keyset.ts';

export type { TransactionRow };

export interface HistoryQuery extends TransactionFilter {
  limit: number;
  /** Where the previous page ended. */
  after?: KeysetPosition;
}

/** One page of a wallet's transactions, filtered by type, status and creation time [from, to). */
export async function listTransactions(
  db: Kysely<BillingDB>,
  walletId: string,
  q: HistoryQuery,
): Promise<Page<TransactionRow>> {
  return keysetPage(await listWalletTransactions(db, walletId, q, q.after, q.limit + 1), q.limit);
}

/** One transaction by its ID (any wallet's: the caller has already decided it may see it), or undefined. */
export async function findTransaction(db: Kysely<BillingDB>, id: string): Promise<TransactionRow | undefined> {
  return getTransaction(db, id);
}
