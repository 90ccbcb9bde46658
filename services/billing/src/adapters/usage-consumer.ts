/**
 * Usage updates over NATS: a durable JetStream pull consumer (common's
 * `startDurableConsumer`; `billing-usage` on stream `BILLING_USAGE` by default, subjects `<usage prefix>.>`, explicit
 * ack), shared by every billing instance (each message goes to one of them), feeds
 * each message to the same domain function as HTTP. The message ID is the
 * payload's `message_id`, else its `Nats-Msg-Id` header, so a redelivery (or a
 * re-publish) is applied once.
 *
 * A message carries its sender's access token in an `Authorization: Bearer
 * <token>` header, verified like an HTTP request's (the same JWKS); the sender
 * must be allowed to report the session (the provider owner's daemon, an admin
 * or a service), exactly as over HTTP. A message without a valid token is
 * rejected and counted (`billing_usage_messages_rejected_total{reason}`),
 * never applied. With `subjectIdentity`, a message on `<prefix>.<owner ID>.<client ID>.<session_id>` (a daemon's
 * NATS user may publish only on its own owner's and its own client's: auth's NATS users) needs no token and is that
 * daemon client's. Malformed messages, rejected ones and updates for unknown or
 * ended sessions are terminated and logged (never redelivered forever); other
 * failures (the database away) are nak'ed and retried later.
 */

import type { NatsPublisher, Principal, Settlement, TokenVerifier } from '@gpu/common';
import {
  type DurableConsumer,
  isRefusal,
  type Logger,
  startDurableConsumer,
  subjectPrincipal,
  subjectSender,
} from '@gpu/common';
import type { JsMsg } from '@nats-io/jetstream';
import { Counter } from 'prom-client';
import type { BillingContext } from '../domain/context.ts';
import {
  applyUsageUpdate,
  toUsageUpdate,
  type UsageNatsMessage,
  usageNatsMessageSchema,
} from '../domain/sessions/index.ts';
import { senderOf } from './message-sender.ts';

const USAGE_STREAM = 'BILLING_USAGE';
export const USAGE_CONSUMER = 'billing-usage';

export interface UsageConsumer extends Pick<DurableConsumer, 'durable' | 'pending'> {
  /** Metrics to expose on the app's registry (`app.metrics.registerMetric`). */
  metrics: Counter[];
  stop(): Promise<void>;
  /** For /health: resolves while messages can flow, rejects naming what is wrong (consumer deleted, ...). */
  check(): Promise<void>;
}

export interface UsageConsumerOptions {
  connection: NatsPublisher['connection'];
  ctx: BillingContext;
  /** Verifies each message's token; null only with access control switched off (every message is then trusted). */
  verifier: TokenVerifier | null;
  /** Subject prefix: messages arrive on `<prefix>.<session_id>`. */
  prefix: string;
  /**
   * Also take `<prefix>.<owner ID>.<client ID>.<session_id>` as that daemon client's, with no token
   * (`messaging.subject_identity`: the NATS server enforced who published it).
   */
  subjectIdentity?: boolean;
  logger: Logger;
  stream?: string;
  durable?: string;
  /** How long a delivered message waits for its ack before it is delivered again (default 30 s). */
  ackWaitMs?: number;
  /**
   * How many messages may be in hand at once (default 512). They are applied in
   * batches of concurrent updates (domain/sessions/usage-updates.ts: group commit), so
   * this bounds the batch size rather than the database connections used.
   */
  concurrency?: number;
}

/** Starts consuming (common's durable consumer); resolves once the stream and the durable consumer exist. */
export async function startUsageConsumer(opts: UsageConsumerOptions): Promise<UsageConsumer> {
  const rejected = new Counter({
    name: 'billing_usage_messages_rejected_total',
    help: 'NATS usage messages rejected and never applied, by reason (malformed, unauthenticated, forbidden, refused, gave_up)',
    labelNames: ['reason'] as const,
    registers: [],
  });
  const handling: Handling = { ...opts, rejected };
  const limit = opts.concurrency ?? 512;
  // Messages are applied concurrently (up to `limit`), grouped into few database transactions.
  const consumer = startDurableConsumer({
    connection: opts.connection,
    name: 'usage consumer',
    what: 'usage message',
    durable: opts.durable ?? USAGE_CONSUMER,
    filter: `${opts.prefix}.>`,
    stream: { ensure: opts.stream ?? USAGE_STREAM },
    ackWaitMs: opts.ackWaitMs ?? 30_000,
    maxDeliver: 20,
    batch: limit,
    concurrency: limit,
    schema: usageNatsMessageSchema,
    handle: (body, msg) => handle(handling, body, msg),
    onMalformed: () => rejected.inc({ reason: 'malformed' }),
    onGaveUp: () => rejected.inc({ reason: 'gave_up' }),
    logger: opts.logger,
  });
  await consumer.ready;
  return { ...consumer, metrics: [rejected] };
}

type Handling = UsageConsumerOptions & { rejected: Counter<'reason'> };

async function handle(opts: Handling, body: UsageNatsMessage, msg: JsMsg): Promise<Settlement> {
  const named = opts.subjectIdentity ? subjectSender(opts.prefix, msg.subject) : undefined;
  // Several reports come only on a subject naming their sender (a daemon that has a NATS user of its own); one
  // report's subject names its session.
  const batch = 'reports' in body;
  if (batch ? !named : (named?.id ?? msg.subject.slice(opts.prefix.length + 1)) !== body.session_id) {
    const err = batch
      ? `several reports on ${msg.subject}, a subject naming no sender`
      : `subject ${msg.subject} names another session`;
    opts.logger.warn({ err }, 'malformed usage message dropped');
    opts.rejected.inc({ reason: 'malformed' });
    return 'term';
  }
  let sender: Principal;
  try {
    sender = named ? subjectPrincipal(named) : await senderOf(opts, msg);
  } catch (err) {
    if (!isRefusal(err)) {
      // The JWKS could not be fetched: not the sender's fault, try again later.
      opts.logger.warn({ err: (err as Error).message }, 'usage message sender not verified; will retry');
      return 'retry';
    }
    opts.logger.warn({ code: err.code, subject: msg.subject }, 'unauthenticated usage message rejected');
    opts.rejected.inc({ reason: 'unauthenticated' });
    return 'term';
  }
  const correlationId = msg.headers?.get('X-Correlation-ID') || undefined;
  // Each report as if it came alone (a batch's reports carry their own message IDs; one alone may use the header's).
  const reports = batch ? body.reports : [body];
  const fallbackId = batch ? undefined : msg.headers?.get('Nats-Msg-Id');
  const settled = await Promise.allSettled(
    reports.map((r) => applyUsageUpdate(opts.ctx, toUsageUpdate(r, fallbackId, correlationId, sender))),
  );
  let failed: unknown;
  settled.forEach((s, i) => {
    if (s.status === 'fulfilled') return;
    if (!isRefusal(s.reason)) {
      failed ??= s.reason;
      return;
    }
    opts.logger.info({ code: s.reason.code, session_id: reports[i]!.session_id }, 'usage report refused');
    opts.rejected.inc({ reason: s.reason.kind === 'forbidden' ? 'forbidden' : 'refused' });
  });
  // The database away: the whole message again later (its applied reports are applied once, by their IDs).
  if (failed !== undefined) throw failed;
  return reports.length === 1 && settled[0]!.status === 'rejected' ? 'term' : 'ack';
}
