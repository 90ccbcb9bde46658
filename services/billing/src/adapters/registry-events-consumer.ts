/**
 * What billing takes from the provider registry, as its message bus (common's `MessageBus`: one schema and one
 * handler per kind), over a durable JetStream pull consumer (`billing-provider-status` on the registry's stream
 * `REGISTRY`, subject `registry.providers.status`, explicit ack):
 *
 * - `provider.status_changed` to `offline`, `maintenance` or `error`, and `provider.removed`: the machine's running
 *   sessions end (domain/sessions/provider-offline.ts); any change wakes the jobs round, with the jobs waiting out
 *   their retry too (a machine back offers its GPUs again; one gone leaves its jobs to place elsewhere);
 * - `provider.daemon_bound`: the machine's running sessions take their reports from that daemon client
 *   (`followDaemonBinding`).
 *
 * A malformed event is terminated and logged (it can never apply); a failure (the database away) is nak'ed and
 * redelivered, and ending is idempotent, so a redelivery, or the same event handled by another billing instance, ends
 * nothing twice. A new kind from the registry is one handler added to `registryMessages`.
 */
import {
  type DurableConsumer,
  type Logger,
  MessageBus,
  type NatsPublisher,
  onMessage,
  startBusConsumer,
  zTimestamp,
} from '@gpu/common';
import { z } from 'zod';
import type { BillingContext } from '../domain/context.ts';
import { endSessionsOfStoppedProvider, followDaemonBinding, REMOVED } from '../domain/sessions/index.ts';

export const PROVIDER_STATUS_CONSUMER = 'billing-provider-status';

/** The part of the registry's events billing reads: the machine, and when. */
const machineEvent = { provider_id: z.string().min(1), occurred_at: zTimestamp() };

/** Billing's bus of the registry's messages. */
export function registryMessages(ctx: BillingContext): MessageBus {
  const stopped = async (providerId: string, status: string, occurredAt: string, correlationId?: string) => {
    await endSessionsOfStoppedProvider(ctx, { providerId, status, occurredAt: new Date(occurredAt), correlationId });
    ctx.state.wakeJobs('capacity');
  };
  return new MessageBus([
    onMessage({
      kind: 'provider.status_changed',
      schema: z.object({ kind: z.literal('provider.status_changed'), status: z.string().min(1), ...machineEvent }),
      handle: (m, meta) => stopped(m.provider_id, m.status, m.occurred_at, meta.correlationId),
    }),
    onMessage({
      kind: 'provider.removed',
      schema: z.object({ kind: z.literal('provider.removed'), ...machineEvent }),
      handle: (m, meta) => stopped(m.provider_id, REMOVED, m.occurred_at, meta.correlationId),
    }),
    onMessage({
      kind: 'provider.daemon_bound',
      schema: z.object({
        kind: z.literal('provider.daemon_bound'),
        daemon_client_id: z.string().min(1).nullable(),
        ...machineEvent,
      }),
      handle: async (m, meta) => {
        await followDaemonBinding(ctx, {
          providerId: m.provider_id,
          clientId: m.daemon_client_id,
          correlationId: meta.correlationId,
        });
      },
    }),
  ]);
}

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
  return startBusConsumer({
    connection: opts.connection,
    bus: registryMessages(opts.ctx),
    name: 'provider status consumer',
    durable: opts.durable ?? PROVIDER_STATUS_CONSUMER,
    filter: opts.subject,
    stream: { await: "the registry's status stream" },
    ackWaitMs: 60_000,
    logger: opts.logger,
  });
}
