/**
 * Storage usage over NATS: a durable JetStream pull consumer (common's `startDurableConsumer`;
 * `billing-storage-usage` on stream `STORAGE_USAGE` by default, subjects `<storage usage prefix>.>`, explicit ack),
 * shared by every billing instance, that charges each report with the same domain function as
 * `POST /billing/storage-usage` (domain/storage/charges.ts: exactly once per user and period, whatever the
 * redeliveries).
 *
 * A message carries its sender's access token in an `Authorization: Bearer <token>` header, verified like an HTTP
 * request's as of when the stream took the message (a report that waited out a billing outage keeps its sender); only
 * platform services (the storage service's client) and admins may report, as over HTTP, and no period that had not
 * ended when the message was sent (a token replayed to charge the future). Malformed,
 * unauthenticated and refused messages (another user's subject, a period overlapping a charged one) are terminated,
 * counted (`billing_storage_usage_messages_rejected_total{reason}`) and logged, never applied; other failures (the
 * database away, the keys not fetched) are retried later.
 */
import {
  type DurableConsumer,
  isRefusal,
  type Logger,
  type NatsPublisher,
  startDurableConsumer,
  type TokenVerifier,
} from '@gpu/common';
import { Counter } from 'prom-client';
import type { BillingContext } from '../domain/context.ts';
import { chargeStorage, storageUsageSchema, toStorageUsageReport } from '../domain/storage/index.ts';
import { senderOf, sentAt } from './message-sender.ts';

export interface StorageUsageConsumer extends Pick<DurableConsumer, 'durable' | 'pending'> {
  metrics: Counter[];
  stop(): Promise<void>;
  check(): Promise<void>;
}

export interface StorageUsageConsumerOptions {
  connection: NatsPublisher['connection'];
  ctx: BillingContext;
  verifier: TokenVerifier | null;
  /** Subject prefix: reports arrive on `<prefix>.<user_id>`. */
  prefix: string;
  stream: string;
  durable: string;
  logger: Logger;
}

/** Starts consuming; resolves once the stream and the durable consumer exist. */
export async function startStorageUsageConsumer(opts: StorageUsageConsumerOptions): Promise<StorageUsageConsumer> {
  const rejected = new Counter({
    name: 'billing_storage_usage_messages_rejected_total',
    help: 'NATS storage usage messages rejected and never applied, by reason (malformed, unauthenticated, refused, gave_up)',
    labelNames: ['reason'] as const,
    registers: [],
  });
  const consumer = startDurableConsumer({
    connection: opts.connection,
    name: 'storage usage consumer',
    what: 'storage usage message',
    durable: opts.durable,
    filter: `${opts.prefix}.>`,
    stream: { ensure: opts.stream },
    ackWaitMs: 30_000,
    // Retried for an hour (common's bound): a report that waits out a database outage is charged once the database
    // is back (the storage service has let go of it once the stream took it). One that still fails is given up on,
    // counted and logged with its stream sequence, and stays in the stream for an operator to publish again.
    concurrency: 8,
    schema: storageUsageSchema,
    onMalformed: () => rejected.inc({ reason: 'malformed' }),
    onGaveUp: () => rejected.inc({ reason: 'gave_up' }),
    logger: opts.logger,
    async handle(body, msg) {
      if (msg.subject !== `${opts.prefix}.${body.user_id}`) {
        opts.logger.warn({ subject: msg.subject }, "storage usage message on another user's subject dropped");
        rejected.inc({ reason: 'malformed' });
        return 'term';
      }
      try {
        const sender = await senderOf(opts, msg);
        await chargeStorage(opts.ctx, sender, toStorageUsageReport(body), sentAt(msg));
        return 'ack';
      } catch (err) {
        if (!isRefusal(err)) throw err;
        const reason = err.kind === 'unauthenticated' ? 'unauthenticated' : 'refused';
        opts.logger.warn({ code: err.code, user_id: body.user_id }, 'storage usage message refused');
        rejected.inc({ reason });
        return 'term';
      }
    },
  });
  await consumer.ready;
  return { ...consumer, metrics: [rejected] };
}
