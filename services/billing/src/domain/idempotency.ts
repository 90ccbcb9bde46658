/**
 * Idempotency keys for money-moving requests. A key is bound to a hash of the
 * request (method, path and canonical body). Rules (README "Idempotency"):
 *  - the key is claimed in the same database transaction as the money
 *    movement, so a request either moved money and owns its key, or did
 *    neither; a concurrent twin fails on the key's primary key and replays;
 *  - the first definitive answer is stored and replayed to every retry with
 *    the same key and parameters (status and body);
 *  - the same key with other parameters is IDEMPOTENCY_KEY_REUSED (conflict);
 *  - answers a retry could change (validation errors, the chain unavailable,
 *    a deposit not yet final, any failure but a failed chain transfer) are
 *    not stored: a retry runs again (`isDefinitiveError`).
 */
import { createHash } from 'node:crypto';
import { isAppError, isRefusal } from '@gpu/common';
import type { Kysely, Transaction } from 'kysely';
import {
  findKey,
  type IdempotencyContext,
  IdempotencyKeyTaken,
  insertKey,
  type StoredResponse,
  storeResponse,
} from '../db/idempotency-repository.ts';
import type { BillingDB } from '../db/schema.ts';
import { billingErrors } from '../errors.ts';

export { type IdempotencyContext, IdempotencyKeyTaken, type StoredResponse };

/**
 * Claims the key in the money movement's own transaction, with the answer when it is already known; throws
 * IdempotencyKeyTaken when another request holds it.
 */
export const claimKey = insertKey;

/** Stores the first definitive answer of a key, replayed to every retry. */
export const storeAnswer = storeResponse;

export type KeyState =
  | { kind: 'new' }
  | { kind: 'replay'; response: StoredResponse }
  | { kind: 'in_progress'; transactionId: string | null };

/**
 * The request's key as a money movement sees it: claimed inside the movement's transaction, with the movement's
 * result when it is already final (the HTTP side turns the result into the answer stored for retries). Claiming a
 * key another request holds throws (the transaction rolls back, moving nothing).
 */
export interface KeyClaim<T> {
  claim(trx: Transaction<BillingDB>, transactionId: string | null, result?: T): Promise<void>;
}

function canonical(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(canonical);
  if (value && typeof value === 'object') {
    return Object.fromEntries(
      Object.keys(value)
        .sort()
        .map((k) => [k, canonical((value as Record<string, unknown>)[k])]),
    );
  }
  return value;
}

/** Hash of what makes two requests "the same": method, path and body (key order ignored). */
export function requestHash(method: string, path: string, body: unknown): string {
  return createHash('sha256')
    .update(JSON.stringify([method.toUpperCase(), path, canonical(body ?? null)]))
    .digest('hex');
}

/** Looks a key up; throws IDEMPOTENCY_KEY_REUSED when it belongs to other parameters. */
export async function lookupKey(db: Kysely<BillingDB>, ctx: IdempotencyContext): Promise<KeyState> {
  const row = await findKey(db, ctx.key);
  if (!row) return { kind: 'new' };
  if (row.request_hash !== ctx.hash) throw billingErrors.idempotencyKeyReused();
  if (row.response_status === null) return { kind: 'in_progress', transactionId: row.transaction_id };
  return { kind: 'replay', response: { status: row.response_status, body: row.response_body } };
}

const NOT_DEFINITIVE = new Set([
  'VALIDATION_ERROR',
  // The state of another service, which changes by itself: a retry must ask again.
  'PROVIDER_NOT_AVAILABLE',
  'PROVIDER_NOT_FOUND',
  'GPU_GROUP_TOO_SMALL',
  'BIDS_NOT_ACCEPTED',
  'BID_BELOW_FLOOR',
  'RESERVATION_NOT_FOUND',
  'PROVIDER_REGISTRY_UNAVAILABLE',
  'MALFORMED_JSON',
  'DEPOSIT_NOT_FINAL',
  'IDEMPOTENCY_KEY_REUSED',
  'IDEMPOTENCY_KEY_IN_PROGRESS',
  // A window that ends by itself (a wallet's withdrawals of the hour): a retry after it must go through.
  'RATE_LIMITED',
]);

/** Whether an error is a definitive answer that a retry with the same key must get again. */
export function isDefinitiveError(err: unknown): boolean {
  if (!isAppError(err)) return false;
  if (NOT_DEFINITIVE.has(err.code)) return false;
  // Who may act changes (a wallet opened, a machine handed over): a refusal of the caller is not stored.
  if (err.kind === 'forbidden') return false;
  return (isRefusal(err) && err.kind !== 'invalid') || err.kind === 'dependency_failed';
}
