/**
 * How many withdrawals a wallet may make in an hour (`billing.withdrawals_per_hour`), counted from the wallet's own
 * withdrawal records (`transactions`, through the partial index `transactions_withdrawals`) over the hour before each
 * request: a sliding window, by the records' own times (the clock of the instance that wrote each, as every other
 * time billing records), and as durable as the records. Each withdrawal costs the
 * treasury the transaction's fee in SOL whatever its amount: without a limit, a wallet holding one token could make a
 * million withdrawals of its smallest unit and drain the treasury's SOL, which nothing in the ledger would show. (A
 * fixed window, as the counters of the `rate_limits` table kept until migration 0046 dropped it, let twice the limit
 * through across a window's edge, and forgot its counts in a crash of the database.)
 *
 * A request is refused before anything is built when the hour is used up (`check`, nothing held), and counted again
 * in the debit's transaction under a lock of the wallet's withdrawals (`count`): only a withdrawal that is debited
 * counts (its record is written in that transaction), and two at once cannot both take the last one. A withdrawal
 * that failed on chain counts (its fee was spent). A refusal is 429 `RATE_LIMITED` with `Retry-After`: the seconds
 * until the oldest withdrawal that fills the limit is an hour old. Nothing is debited or recorded.
 */
import { AppError } from '@gpu/common';
import type { Kysely, Transaction } from 'kysely';
import type { BillingDB } from '../../db/schema.ts';
import { lockWithdrawals, nthWithdrawalSince } from '../../db/transaction-repository.ts';

const HOUR_MS = 3_600_000;

/** The limit, or none (`withdrawals_per_hour: 0`). */
export interface WithdrawalLimit {
  perHour: number;
}

/** Refuses (429) a withdrawal from a wallet that made its withdrawals of the last hour; holds nothing. */
export async function checkWithdrawalLimit(
  limit: WithdrawalLimit | null,
  db: Kysely<BillingDB>,
  walletId: string,
  now: Date,
): Promise<void> {
  if (limit) await refusePast(limit, db, walletId, now);
}

/**
 * Checks again in the debit's transaction, once no other withdrawal of the wallet is between its check and its commit
 * (a transaction-scoped advisory lock per wallet, taken before the debit's row locks): the record the debit writes is
 * what the next one counts.
 */
export async function countWithdrawal(
  limit: WithdrawalLimit | null,
  trx: Transaction<BillingDB>,
  walletId: string,
  now: Date,
): Promise<void> {
  if (!limit) return;
  await lockWithdrawals(trx, walletId);
  await refusePast(limit, trx, walletId, now);
}

async function refusePast(limit: WithdrawalLimit, db: Kysely<BillingDB>, walletId: string, now: Date) {
  // The `perHour`-th newest withdrawal of the last hour, if there is one: the limit is used up until it is an hour old.
  const oldest = await nthWithdrawalSince(db, walletId, new Date(now.getTime() - HOUR_MS), limit.perHour);
  if (!oldest) return;
  const retryAfter = String(Math.max(1, Math.ceil((oldest.getTime() + HOUR_MS - now.getTime()) / 1000)));
  throw new AppError(
    'rate_limited',
    'RATE_LIMITED',
    `wallet ${walletId} made ${limit.perHour} withdrawals within the hour, the most it may: retry after ` +
      `${retryAfter} s`,
    { headers: { 'retry-after': retryAfter } },
  );
}
