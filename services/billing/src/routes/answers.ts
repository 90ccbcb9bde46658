/** Answers of the money-moving routes that depend on how the movement ended (stored for idempotent retries). */
import { problemOf, statusOf } from '@gpu/common';
import type { StoredResponse } from '../domain/idempotency.ts';
import type { TransactionRow } from '../domain/wallets/index.ts';
import { billingErrors } from '../errors.ts';
import { transactionJson } from '../wire/presenters.ts';

/** A withdrawal or payout: 200 confirmed, 202 pending (sent, not yet confirmed), else 502 (failed, reversed). */
export function payoutAnswer(scale: number, row: TransactionRow): StoredResponse {
  const body = transactionJson(row, scale);
  if (row.status === 'confirmed') return { status: 200, body };
  if (row.status === 'pending') return { status: 202, body };
  const problem = billingErrors.chainTransactionFailed(
    `the ${row.type} failed on chain and was reversed: ${row.failure_reason ?? 'unknown reason'}`,
    { transaction_id: row.id, transaction: body },
  );
  return { status: statusOf(problem), body: problemOf(problem) };
}

/** A confirmed deposit: 201 with its record. */
export const depositAnswer =
  (scale: number) =>
  (row: TransactionRow): StoredResponse => ({
    status: 201,
    body: transactionJson(row, scale),
  });
