/**
 * How many withdrawals a wallet may make in an hour (`billing.withdrawals_per_hour`), counted in PostgreSQL by
 * @gpu/common's `RateLimiter`, so every instance counts against the same window. Each withdrawal costs the treasury
 * the transaction's fee in SOL whatever its amount: without a limit, a wallet holding one token could make a million
 * withdrawals of its smallest unit and drain the treasury's SOL, which nothing in the ledger would show.
 *
 * A request is refused before anything is built when the window is used up (`check`, nothing counted), and counted in
 * the debit's transaction (`count`): only a withdrawal that is debited counts, and two at once cannot both take the
 * last one. A refusal is 429 `RATE_LIMITED` with `Retry-After` (the window's end); nothing is debited or recorded.
 */
import { AppError, isAppError, type RateLimiter } from '@gpu/common';
import type { Transaction } from 'kysely';
import type { BillingDB } from '../../db/schema.ts';

const HOUR_MS = 3_600_000;
const RULE = 'withdrawals';

/** The limit, or none (`withdrawals_per_hour: 0`). */
export interface WithdrawalLimit {
  limiter: RateLimiter;
  perHour: number;
}

/** Refuses (429) a withdrawal from a wallet whose window is used up; counts nothing. */
export async function checkWithdrawalLimit(limit: WithdrawalLimit | null, walletId: string): Promise<void> {
  if (!limit) return;
  await named(limit, walletId, () => limit.limiter.check(rule(limit), RULE, walletId));
}

/** Counts one withdrawal in the debit's transaction, refusing (429) one past the limit. */
export async function countWithdrawal(
  limit: WithdrawalLimit | null,
  trx: Transaction<BillingDB>,
  walletId: string,
): Promise<void> {
  if (!limit) return;
  await named(limit, walletId, () => limit.limiter.consume(rule(limit), RULE, walletId, trx));
}

const rule = (limit: WithdrawalLimit) => ({ max: limit.perHour, windowMs: HOUR_MS });

/** The limiter's refusal, saying which limit it is. */
async function named(limit: WithdrawalLimit, walletId: string, run: () => Promise<void>): Promise<void> {
  try {
    await run();
  } catch (err) {
    if (!isAppError(err) || err.code !== 'RATE_LIMITED') throw err;
    const retryAfter = err.headers['retry-after'] ?? '1';
    throw new AppError(
      'rate_limited',
      'RATE_LIMITED',
      `wallet ${walletId} made ${limit.perHour} withdrawals within the hour, the most it may: retry after ` +
        `${retryAfter} s`,
      { headers: { 'retry-after': retryAfter } },
    );
  }
}
