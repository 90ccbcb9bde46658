/**
 * The provider registry's status events into billing: a durable JetStream pull consumer (`billing-provider-status`
 * on the registry's stream `REGISTRY`, subject `registry.providers.status`, explicit ack) that ends the running
 * sessions of a provider that went `offline` or `error` (domain/provider-offline.ts). Other changes are
 * acknowledged and ignored. A malformed event is terminated and logged (it can never apply); a failure (the
 * database away) is nak'ed and redelivered, and ending is idempotent, so a redelivery ends nothing twice.
 */
import { awaitStream, type Logger, type NatsPublisher } from '@gpu/common';
import {
  AckPolicy,
  type ConsumerMessages,
  DeliverPolicy,
  type JsMsg,
  jetstream,
  jetstreamManager,
} from '@nats-io/jetstream';
import { z } from 'zod';
import type { BillingContext } from '../domain/context.ts';
import { endSessionsOfStoppedProvider } from '../domain/provider-offline.ts';

export const PROVIDER_STATUS_CONSUMER = 'billing-provider-status';

/** The part of the registry's `provider.status_changed` event billing reads. */
const statusEventSchema = z.object({
  provider_id: z.string().min(1),
  status: z.string().min(1),
  occurred_at: z.iso.datetime({ offset: true }),
});

export interface RegistryEventsConsumerOptions {
  connection: NatsPublisher['connection'];
  ctx: BillingContext;
  /** The registry's status subject. */
  subject: string;
  durable?: string;
  logger: Logger;
}

export interface RegistryEventsConsumer {
  stop(): Promise<void>;
  /** For /health: rejects once the consumer failed or stopped receiving (waiting for the registry's stream is fine). */
  check(): Promise<void>;
}

/**
 * Starts consuming in the background: waits for the registry's stream (the stream that captures the status subject,
 * whatever its name; the registry creates it), makes the durable consumer if it is missing, then applies each event.
 */
export function startRegistryEventsConsumer(opts: RegistryEventsConsumerOptions): RegistryEventsConsumer {
  const durable = opts.durable ?? PROVIDER_STATUS_CONSUMER;
  const abort = new AbortController();
  let messages: ConsumerMessages | undefined;
  let failed: string | null = null;
  const loop = (async () => {
    const jsm = await jetstreamManager(opts.connection);
    const stream = await awaitStream(jsm, opts.subject, {
      signal: abort.signal,
      onWait: (n) => {
        if (n === 1) opts.logger.info({ subject: opts.subject }, "waiting for the registry's status stream");
      },
    });
    const existing = await jsm.consumers.info(stream, durable).catch(() => undefined);
    if (!existing) {
      await jsm.consumers.add(stream, {
        durable_name: durable,
        ack_policy: AckPolicy.Explicit,
        deliver_policy: DeliverPolicy.All,
        filter_subject: opts.subject,
        ack_wait: 60_000_000_000,
        max_deliver: -1,
      });
    }
    const consumer = await jetstream(opts.connection).consumers.get(stream, durable);
    messages = await consumer.consume({ max_messages: 64 });
    if (abort.signal.aborted) await messages.close();
    for await (const msg of messages) await handle(opts, msg);
    if (!abort.signal.aborted) failed = 'provider status consumer stopped receiving messages';
  })().catch((err) => {
    if (abort.signal.aborted) return;
    failed = `provider status consumer failed: ${(err as Error).message}`;
  });
  void loop.then(() => {
    if (failed) opts.logger.error(failed);
  });
  return {
    async stop() {
      abort.abort();
      await messages?.close();
      await loop;
    },
    async check() {
      if (failed) throw new Error(failed);
    },
  };
}

async function handle(opts: RegistryEventsConsumerOptions, msg: JsMsg): Promise<void> {
  let event: z.infer<typeof statusEventSchema>;
  try {
    event = statusEventSchema.parse(msg.json());
  } catch (err) {
    opts.logger.warn({ err: (err as Error).message, subject: msg.subject }, 'malformed provider status event dropped');
    msg.term();
    return;
  }
  try {
    await endSessionsOfStoppedProvider(opts.ctx, {
      providerId: event.provider_id,
      status: event.status,
      occurredAt: new Date(event.occurred_at),
      correlationId: msg.headers?.get('X-Correlation-ID') || undefined,
    });
    msg.ack();
  } catch (err) {
    opts.logger.warn(
      { err: (err as Error).message, provider_id: event.provider_id },
      'provider status event failed; will retry',
    );
    msg.nak(5_000);
  }
}
