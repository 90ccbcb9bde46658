/**
 * Runs a money-moving handler under the request's Idempotency-Key (when
 * given): replays a stored answer, refuses a key reused with other
 * parameters, and stores definitive error answers. The handler claims the
 * key inside its own money-moving transaction (domain/idempotency.ts), through
 * the `KeyClaim` made by `keyClaim`.
 */
import { type AppError, PROBLEM_CONTENT_TYPE, problemOf, type RouteDocs, statusOf } from '@gpu/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { BillingContext } from '../domain/context.ts';
import {
  claimKey,
  type IdempotencyContext,
  IdempotencyKeyTaken,
  isDefinitiveError,
  type KeyClaim,
  lookupKey,
  requestHash,
  type StoredResponse,
  storeAnswer,
} from '../domain/idempotency.ts';
import { billingErrors } from '../errors.ts';

export interface IdempotentOptions {
  db: BillingContext['db'];
  /** Builds the answer of a claimed key whose request never stored one (a crash); null while still running. */
  resume?: (transactionId: string) => Promise<StoredResponse | null>;
}

/**
 * How an idempotent route reads in the document: its answers of these statuses may be the stored answer of an
 * earlier request with the same key (`Idempotent-Replayed: true`), and its 409 `IDEMPOTENCY_KEY_IN_PROGRESS` (the
 * same key still being handled) says when to ask again (`Retry-After`).
 */
export const replayable = (...statuses: number[]): RouteDocs => ({
  headers: {
    ...Object.fromEntries(statuses.map((status) => [status, ['Idempotent-Replayed'] as const])),
    409: ['Retry-After'],
  },
});

function send(reply: FastifyReply, response: StoredResponse, replayed: boolean) {
  if (replayed) reply.header('idempotent-replayed', 'true');
  reply.code(response.status).serializer(JSON.stringify);
  if (response.status >= 400) reply.type(PROBLEM_CONTENT_TYPE);
  else reply.type('application/json; charset=utf-8');
  return reply.send(response.body);
}

async function stored(opts: IdempotentOptions, ctx: IdempotencyContext): Promise<StoredResponse | null> {
  const state = await lookupKey(opts.db, ctx);
  if (state.kind === 'new') return null;
  if (state.kind === 'replay') return state.response;
  const resumed = state.transactionId && opts.resume ? await opts.resume(state.transactionId) : null;
  if (!resumed) throw billingErrors.idempotencyInProgress(state.transactionId);
  await storeAnswer(opts.db, ctx, resumed, { transactionId: state.transactionId });
  return resumed;
}

/** The hash that binds a request's `Idempotency-Key` to it: method, path (no query) and body. */
export const requestHashOf = (request: FastifyRequest) =>
  requestHash(request.method, request.url.split('?')[0]!, request.body);

/** Handles the request idempotently; `run` gets the key context (null without a key). */
export async function runIdempotent(
  request: FastifyRequest,
  reply: FastifyReply,
  opts: IdempotentOptions,
  run: (idem: IdempotencyContext | null) => Promise<StoredResponse>,
) {
  const key = (request.headers['idempotency-key'] as string | undefined) ?? undefined;
  if (!key) return send(reply, withRequestId(await run(null), request.id), false);
  // A key is the caller's own: scoped to who sends it (and bound to the endpoint by the hash), so one caller's key
  // never replays another's answer or blocks another's request.
  const scoped = `${request.principal?.subject ?? 'anonymous'}:${key}`;
  const ctx: IdempotencyContext = {
    key: scoped,
    hash: requestHashOf(request),
  };
  const previous = await stored(opts, ctx);
  if (previous) return send(reply, previous, true);
  try {
    const response = withRequestId(await run(ctx), request.id);
    await storeAnswer(opts.db, ctx, response);
    return send(reply, response, false);
  } catch (err) {
    if (err instanceof IdempotencyKeyTaken) {
      const other = await stored(opts, ctx);
      if (other) return send(reply, other, true);
      throw billingErrors.idempotencyInProgress(null);
    }
    if (isDefinitiveError(err)) {
      const appError = err as AppError;
      const kept = await storeAnswer(opts.db, ctx, {
        status: statusOf(appError),
        body: { ...problemOf(appError), request_id: request.id },
      });
      // A twin claimed the key meanwhile (this request refused before claiming it, e.g. the funds the twin just took):
      // the key's answer is the twin's, as for a twin that failed on the claim.
      if (!kept) {
        const other = await stored(opts, ctx);
        if (other) return send(reply, other, true);
        throw billingErrors.idempotencyInProgress(null);
      }
    }
    throw err;
  }
}

function withRequestId(response: StoredResponse, requestId: string): StoredResponse {
  if (response.status < 400 || typeof response.body !== 'object' || response.body === null) return response;
  return { ...response, body: { ...(response.body as object), request_id: requestId } };
}

/**
 * The key as the domain claims it: `answer` turns the movement's result into the answer stored for the key (the
 * same answer the route sends). Null without a key.
 */
export function keyClaim<T>(
  idem: IdempotencyContext | null,
  answer: (result: T) => StoredResponse,
): KeyClaim<T> | null {
  if (!idem) return null;
  return {
    claim: (trx, transactionId, result) =>
      claimKey(trx, idem, transactionId, result === undefined ? undefined : answer(result)),
  };
}
