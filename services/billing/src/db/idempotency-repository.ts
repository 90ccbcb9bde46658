/**
 * Queries on idempotency keys: a key, the hash of the request it was first
 * used with, the money movement it claimed and the answer stored for it
 * (domain/idempotency.ts has the rules, routes/idempotent.ts the HTTP side).
 */
import type { Kysely, Transaction } from 'kysely';
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
}

/** Stores the final answer of a claimed key, or claims and stores it (answers before any movement). */
export async function storeResponse(
  db: Kysely<BillingDB>,
  ctx: IdempotencyContext,
  response: StoredResponse,
): Promise<void> {
  await db
    .insertInto('idempotency_keys')
    .values({
      key: ctx.key,
      request_hash: ctx.hash,
      response_status: response.status,
      response_body: JSON.stringify(response.body),
    })
    .onConflict((oc) =>
      oc
        .column('key')
        .doUpdateSet({ response_status: response.status, response_body: JSON.stringify(response.body) })
        .where('idempotency_keys.response_status', 'is', null)
        .where('idempotency_keys.request_hash', '=', ctx.hash),
    )
    .execute();
}
