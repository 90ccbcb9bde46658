/**
 * The provider registry's status events into billing: a durable JetStream pull consumer (common's
 * `startDurableConsumer`; `billing-provider-status` on the registry's stream `REGISTRY`, subject
 * `registry.providers.status`, explicit ack) that ends the running sessions of a provider that went `offline`,
 * into `maintenance` or `error`, or was removed (`provider.removed`) (domain/sessions/provider-offline.ts), and moves
 * the running sessions of a machine bound to another daemon client to that client (`provider.daemon_bound`,
 * `followDaemonBinding`). Other changes are acknowledged and ignored. A malformed event is terminated and logged (it can never apply); a failure (the
 * database away) is nak'ed and redelivered, and ending is idempotent, so a redelivery, or the same event handled by
 * another billing instance, ends nothing twice.
 */
import { type DurableConsumer, type Logger, type NatsPublisher, startDurableConsumer, zTimestamp } from '@gpu/common';
import type { JsMsg } from '@nats-io/jetstream';
import { z } from 'zod';
import type { BillingContext } from '../domain/context.ts';
import { endSessionsOfStoppedProvider, followDaemonBinding, REMOVED } from '../domain/sessions/index.ts';

export const PROVIDER_STATUS_CONSUMER = 'billing-provider-status';

/** The kind of the registry's event of a provider's removal (its `status` is null). */
const PROVIDER_REMOVED = 'provider.removed';

/** The kind of the registry's event of a machine bound to another daemon client (no status). */
const DAEMON_BOUND = 'provider.daemon_bound';

/** The part of the registry's `provider.status_changed`, `provider.removed` and `provider.daemon_bound` events billing reads. */
const statusEventSchema = z.union([
  z.object({
    kind: z.literal(DAEMON_BOUND),
    provider_id: z.string().min(1),
    daemon_client_id: z.string().min(1).nullable(),
    occurred_at: zTimestamp(),
  }),
  z.object({
    kind: z.literal(PROVIDER_REMOVED),
    provider_id: z.string().min(1),
    occurred_at: zTimestamp(),
  }),
  z.object({
    kind: z.string().optional(),
    provider_id: z.string().min(1),
    status: z.string().min(1),
    occurred_at: zTimestamp(),
  }),
]);

export interface RegistryEventsConsumerOptions {
  connection: NatsPublisher['connection'];
  ctx: BillingContext;
  /** The registry's status subject. */
  subject: string;
  durable?: string;
  logger: Logger;
}

export interface RegistryEventsConsumer extends Pick<DurableConsumer, 'durable' | 'pending'> {
  stop(): Promise<void>;
  /** For /health: rejects once the consumer failed or stopped receiving (waiting for the registry's stream is fine). */
  check(): Promise<void>;
}

/** Starts in the background, one event after another, once the registry has made its stream (whatever its name). */
export function startRegistryEventsConsumer(opts: RegistryEventsConsumerOptions): RegistryEventsConsumer {
  return startDurableConsumer({
    connection: opts.connection,
    name: 'provider status consumer',
    what: 'provider status event',
    durable: opts.durable ?? PROVIDER_STATUS_CONSUMER,
    filter: opts.subject,
    stream: { await: "the registry's status stream" },
    ackWaitMs: 60_000,
    schema: statusEventSchema,
    handle: async (event, msg: JsMsg) => {
      const correlationId = msg.headers?.get('X-Correlation-ID') || undefined;
      if (event.kind === DAEMON_BOUND && 'daemon_client_id' in event) {
        await followDaemonBinding(opts.ctx, {
          providerId: event.provider_id,
          clientId: event.daemon_client_id,
          correlationId,
        });
        return 'ack';
      }
      await endSessionsOfStoppedProvider(opts.ctx, {
        providerId: event.provider_id,
        status: 'status' in event ? event.status : REMOVED,
        occurredAt: new Date(event.occurred_at),
        correlationId,
      });
      // A machine back (its GPUs offered again) or gone (its jobs to place elsewhere): the jobs round runs now.
      opts.ctx.state.wakeJobs();
      return 'ack';
    },
    logger: opts.logger,
  });
}
