/**
 * Who sent a NATS message to billing, for both of its consumers (usage reports, stored bytes): the sender's access
 * token travels in the message's `Authorization: Bearer <token>` header and is verified like an HTTP request's (the
 * same JWKS), as of when the stream took the message.
 */
import {
  errors,
  type Principal,
  principalOf,
  type TokenVerifier,
  UNCHECKED_PRINCIPAL,
  verifyBearer,
} from '@gpu/common';
import type { JsMsg } from '@nats-io/jetstream';

/**
 * The message's sender, from its `Authorization` header (the unchecked principal with access control off), judged as
 * of when the stream took the message: one that waited in the stream (billing down, a backlog) past its token's
 * expiry is still its sender's. Throws a refusal for a missing or bad token, another error when the keys could not
 * be fetched (retry later).
 */
export async function senderOf(opts: { verifier: TokenVerifier | null }, msg: JsMsg): Promise<Principal> {
  if (!opts.verifier) return UNCHECKED_PRINCIPAL;
  const sender = principalOf(
    await verifyBearer(opts.verifier, msg.headers?.get('Authorization') || undefined, sentAt(msg)),
  );
  // Messages are for daemons and platform services: an API key's token sends none (as no usage route takes one).
  if (sender.scopes) throw errors.forbidden('an API key sends no message to billing', 'INSUFFICIENT_SCOPE');
  return sender;
}

/** When the stream took the message (its JetStream timestamp). */
export function sentAt(msg: JsMsg): Date {
  return new Date(Math.floor(Number(msg.info.timestampNanos) / 1_000_000));
}
