/**
 * Queries on idempotency keys: a key, the hash of the request it was first
 * used with, the money movement it claimed and the answer stored for it
 * (domain/idempotency.ts has the rules, routes/idempotent.ts the HTTP side).
 */
import { type Kysely, sql, type Transaction } from 'kysely';
import type { BillingDB } from './schema.ts';

/** An answer as stored for a key and replayed to its retries: the response's status and body. */
export interface StoredResponse {
  status: number;
  body: unknown;
}

/** A request's key and the hash of what makes two requests "the same". */
export interface IdempotencyContext {
  key: string;
  hash: string;
  /**
   * Set when this request claimed the key (`insertKey`), with the movement it claimed it for: only such a claim's row
   * takes this request's answer (its transaction may still roll back, and the row with it).
   */
  claimed?: { transactionId: string | null };
}

/** Thrown when a concurrent request claimed the same key first. */
export class IdempotencyKeyTaken extends Error {}

export async function findKey(db: Kysely<BillingDB>, key: string) {
  return db.selectFrom('idempotency_keys').selectAll().where('key', '=', key).executeTakeFirst();
}

const isKeyViolation = (err: unknown) => {
  const e = err as { code?: string; constraint?: string; message?: string };
  return (
    e?.code === '23505' && (e.constraint === 'idempotency_keys_pkey' || /idempotency_keys_pkey/.test(e.message ?? ''))
  );
};

/**
 * Claims the key inside the money-moving transaction, with the answer when it
 * is already known. Throws IdempotencyKeyTaken when another request holds it
 * (the caller's transaction then rolls back, moving nothing).
 */
export async function insertKey(
  trx: Transaction<BillingDB>,
  ctx: IdempotencyContext,
  transactionId: string | null,
  response?: StoredResponse,
): Promise<void> {
  try {
    await trx
      .insertInto('idempotency_keys')
      .values({
        key: ctx.key,
        request_hash: ctx.hash,
        transaction_id: transactionId,
        response_status: response?.status ?? null,
        response_body: response ? JSON.stringify(response.body) : null,
      })
      .execute();
  } catch (err) {
    if (isKeyViolation(err)) throw new IdempotencyKeyTaken();
    throw err;
  }
  ctx.claimed = { transactionId };
}

/**
 * Stores the final answer of a key: claims and stores it when no request holds the key (an answer before any
 * movement), or completes the claim of the movement `claimedBy` (this request's own, or a crashed request's being
 * resumed). The row of another request's claim is left alone, answered or not. Whether the answer was stored.
 */
export async function storeResponse(
  db: Kysely<BillingDB>,
  ctx: IdempotencyContext,
  response: StoredResponse,
  claimedBy: { transactionId: string | null } | undefined = ctx.claimed,
): Promise<boolean> {
  const body = JSON.stringify(response.body);
  const row = await db
    .insertInto('idempotency_keys')
    .values({ key: ctx.key, request_hash: ctx.hash, response_status: response.status, response_body: body })
    .onConflict((oc) =>
      claimedBy
        ? oc
            .column('key')
            .doUpdateSet({ response_status: response.status, response_body: body })
            .where('idempotency_keys.response_status', 'is', null)
            .where('idempotency_keys.request_hash', '=', ctx.hash)
            .where(sql<boolean>`idempotency_keys.transaction_id IS NOT DISTINCT FROM ${claimedBy.transactionId}`)
        : oc.column('key').doNothing(),
    )
    .returning('key')
    .executeTakeFirst();
  return row !== undefined;
}
