/**
 * Usage updates over NATS: a durable JetStream pull consumer (`billing-usage`
 * on stream `BILLING_USAGE`, subjects `<usage prefix>.>`, explicit ack) feeds
 * each message to the same domain function as HTTP. The message ID is the
 * payload's `message_id`, else its `Nats-Msg-Id` header, so a redelivery (or a
 * re-publish) is applied once. Malformed messages and updates for unknown or
 * ended sessions are acknowledged and logged (never redelivered forever);
 * other failures (the database away) are nak'ed and retried later.
 */

import type { NatsPublisher } from '@gpu/common';
import { ensureStream, isRefusal, type Logger } from '@gpu/common';
import {
  AckPolicy,
  type ConsumerMessages,
  DeliverPolicy,
  type JsMsg,
  jetstream,
  jetstreamManager,
} from '@nats-io/jetstream';
import type { BillingContext } from '../domain/context.ts';
import { toUsageUpdate, type UsageMessage, usageMessageSchema } from '../domain/usage-message.ts';
import { applyUsageUpdate } from '../domain/usage-updates.ts';

export const USAGE_STREAM = 'BILLING_USAGE';
export const USAGE_CONSUMER = 'billing-usage';

export interface UsageConsumer {
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
  /** Subject prefix: messages arrive on `<prefix>.<session_id>`. */
  prefix: string;
  logger: Logger;
  stream?: string;
  durable?: string;
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
  const existing = await jsm.consumers.info(stream, durable).catch(() => undefined);
  if (!existing) {
    await jsm.consumers.add(stream, {
      durable_name: durable,
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      filter_subject: `${opts.prefix}.>`,
      ack_wait: 30_000_000_000,
      max_deliver: 20,
    });
  }
  const consumer = await jetstream(opts.connection).consumers.get(stream, durable);
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
      const p: Promise<void> = handle(opts, msg)
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

async function handle(opts: UsageConsumerOptions, msg: JsMsg): Promise<void> {
  let body: UsageMessage;
  try {
    body = usageMessageSchema.parse(msg.json());
    if (msg.subject !== `${opts.prefix}.${body.session_id}`)
      throw new Error(`subject ${msg.subject} names another session`);
  } catch (err) {
    opts.logger.warn({ err: (err as Error).message, subject: msg.subject }, 'malformed usage message dropped');
    msg.term();
    return;
  }
  try {
    await applyUsageUpdate(
      opts.ctx,
      toUsageUpdate(body, msg.headers?.get('Nats-Msg-Id'), msg.headers?.get('X-Correlation-ID') || undefined),
    );
    msg.ack();
  } catch (err) {
    if (isRefusal(err)) {
      opts.logger.info({ code: err.code, session_id: body.session_id }, 'usage message refused');
      msg.term();
      return;
    }
    opts.logger.warn({ err: (err as Error).message, session_id: body.session_id }, 'usage message failed; will retry');
    msg.nak(5_000);
  }
}
