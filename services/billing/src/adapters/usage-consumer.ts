/**
 * Usage updates over NATS: a durable JetStream pull consumer (`billing-usage`
 * on stream `BILLING_USAGE` by default, subjects `<usage prefix>.>`, explicit
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
 * never applied. Malformed messages, rejected ones and updates for unknown or
 * ended sessions are terminated and logged (never redelivered forever); other
 * failures (the database away) are nak'ed and retried later.
 */

import type { NatsPublisher, Principal, TokenVerifier } from '@gpu/common';
import { ensureStream, isRefusal, type Logger, principalOf, UNCHECKED_PRINCIPAL, verifyBearer } from '@gpu/common';
import {
  AckPolicy,
  type ConsumerMessages,
  DeliverPolicy,
  type JsMsg,
  jetstream,
  jetstreamManager,
} from '@nats-io/jetstream';
import { Counter } from 'prom-client';
import type { BillingContext } from '../domain/context.ts';
import { toUsageUpdate, type UsageMessage, usageMessageSchema } from '../domain/usage-message.ts';
import { applyUsageUpdate } from '../domain/usage-updates.ts';

export const USAGE_STREAM = 'BILLING_USAGE';
export const USAGE_CONSUMER = 'billing-usage';

export interface UsageConsumer {
  /** Metrics to expose on the app's registry (`app.metrics.registerMetric`). */
  metrics: Counter[];
  stop(): Promise<void>;
  /** For /health: resolves while messages can flow, rejects naming what is wrong (consumer deleted, ...). */
  check(): Promise<void>;
}

/** Notifications that mean no message will arrive until something changes. */
const TROUBLE = new Set([
  'heartbeats_missed',
  'consumer_not_found',
  'stream_not_found',
  'consumer_deleted',
  'no_responders',
]);

export interface UsageConsumerOptions {
  connection: NatsPublisher['connection'];
  ctx: BillingContext;
  /** Verifies each message's token; null only with access control switched off (every message is then trusted). */
  verifier: TokenVerifier | null;
  /** Subject prefix: messages arrive on `<prefix>.<session_id>`. */
  prefix: string;
  logger: Logger;
  stream?: string;
  durable?: string;
  /** How long a delivered message waits for its ack before it is delivered again (default 30 s). */
  ackWaitMs?: number;
  /**
   * How many messages may be in hand at once (default 512). They are applied in
   * batches of concurrent updates (domain/usage-updates.ts: group commit), so
   * this bounds the batch size rather than the database connections used.
   */
  concurrency?: number;
}

/** Starts consuming; resolves once the stream and the durable consumer exist. */
export async function startUsageConsumer(opts: UsageConsumerOptions): Promise<UsageConsumer> {
  const stream = opts.stream ?? USAGE_STREAM;
  const durable = opts.durable ?? USAGE_CONSUMER;
  const jsm = await jetstreamManager(opts.connection);
  await ensureStream(jsm, { name: stream, subjects: [`${opts.prefix}.>`] });
  const ackWait = (opts.ackWaitMs ?? 30_000) * 1_000_000;
  const existing = await jsm.consumers.info(stream, durable).catch(() => undefined);
  if (!existing) {
    await jsm.consumers.add(stream, {
      durable_name: durable,
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      filter_subject: `${opts.prefix}.>`,
      ack_wait: ackWait,
      max_deliver: 20,
    });
  } else if (existing.config.ack_wait !== ackWait) {
    // The consumer outlives instances: a changed setting takes effect on it (instances agreeing on it).
    await jsm.consumers.update(stream, durable, { ack_wait: ackWait });
  }
  const consumer = await jetstream(opts.connection).consumers.get(stream, durable);
  const rejected = new Counter({
    name: 'billing_usage_messages_rejected_total',
    help: 'NATS usage messages rejected and never applied, by reason (malformed, unauthenticated, forbidden, refused)',
    labelNames: ['reason'] as const,
    registers: [],
  });
  const handling: Handling = { ...opts, rejected };
  const limit = opts.concurrency ?? 512;
  const messages: ConsumerMessages = await consumer.consume({ max_messages: limit });
  // Messages are applied concurrently (up to `limit`), grouped into few database transactions.
  let trouble: string | null = null;
  let stopping = false;
  let ended = false;
  void (async () => {
    for await (const note of messages.status()) {
      if (TROUBLE.has(note.type)) {
        trouble = note.type.replaceAll('_', ' ');
        opts.logger.warn({ notification: note }, 'usage consumer cannot receive messages');
      } else if (note.type === 'heartbeat') trouble = null;
    }
  })().catch(() => {});
  const inFlight = new Set<Promise<void>>();
  const loop = (async () => {
    for await (const msg of messages) {
      trouble = null;
      const p: Promise<void> = handle(handling, msg)
        .catch((err) => opts.logger.warn({ err: (err as Error).message }, 'usage message handling failed'))
        .finally(() => inFlight.delete(p));
      inFlight.add(p);
      if (inFlight.size >= limit) await Promise.race(inFlight);
    }
    await Promise.all(inFlight);
  })().finally(() => {
    ended = true;
    if (!stopping) opts.logger.error('usage consumer stopped receiving messages');
  });
  return {
    metrics: [rejected],
    async stop() {
      stopping = true;
      await messages.close();
      await loop.catch(() => {});
    },
    async check() {
      if (ended) throw new Error('usage consumer is not running');
      if (trouble) throw new Error(`usage consumer: ${trouble}`);
    },
  };
}

type Handling = UsageConsumerOptions & { rejected: Counter<'reason'> };

/** The message's sender, from its `Authorization` header (the unchecked principal with access control off). */
async function senderOf(opts: Handling, msg: JsMsg): Promise<Principal> {
  if (!opts.verifier) return UNCHECKED_PRINCIPAL;
  return principalOf(await verifyBearer(opts.verifier, msg.headers?.get('Authorization') || undefined));
}

async function handle(opts: Handling, msg: JsMsg): Promise<void> {
  let body: UsageMessage;
  try {
    body = usageMessageSchema.parse(msg.json());
    if (msg.subject !== `${opts.prefix}.${body.session_id}`)
      throw new Error(`subject ${msg.subject} names another session`);
  } catch (err) {
    opts.logger.warn({ err: (err as Error).message, subject: msg.subject }, 'malformed usage message dropped');
    opts.rejected.inc({ reason: 'malformed' });
    msg.term();
    return;
  }
  let sender: Principal;
  try {
    sender = await senderOf(opts, msg);
  } catch (err) {
    if (!isRefusal(err)) {
      // The JWKS could not be fetched: not the sender's fault, try again later.
      opts.logger.warn({ err: (err as Error).message }, 'usage message sender not verified; will retry');
      msg.nak(5_000);
      return;
    }
    opts.logger.warn({ code: err.code, session_id: body.session_id }, 'unauthenticated usage message rejected');
    opts.rejected.inc({ reason: 'unauthenticated' });
    msg.term();
    return;
  }
  try {
    await applyUsageUpdate(
      opts.ctx,
      toUsageUpdate(body, msg.headers?.get('Nats-Msg-Id'), msg.headers?.get('X-Correlation-ID') || undefined, sender),
    );
    msg.ack();
  } catch (err) {
    if (isRefusal(err)) {
      opts.logger.info({ code: err.code, session_id: body.session_id }, 'usage message refused');
      opts.rejected.inc({ reason: err.kind === 'forbidden' ? 'forbidden' : 'refused' });
      msg.term();
      return;
    }
    opts.logger.warn({ err: (err as Error).message, session_id: body.session_id }, 'usage message failed; will retry');
    msg.nak(5_000);
  }
}
