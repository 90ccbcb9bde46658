/**
 * What the registry takes from billing, as its message bus (common's `MessageBus`): one schema and one handler per
 * kind, whichever transport brings it — billing's stream over NATS (`startBillingConsumers`: durable JetStream pull
 * consumers, explicit ack) or, when billing runs without NATS, the registry's HTTP inbox (`POST /messages`).
 *
 * - `lease.held`: billing's statement of a machine's held GPUs, kept when it is the newest (domain/gpu-holds.ts);
 * - `session.completed`, `session.terminated`: a rental's end, counted once in the machine's reliability;
 * - `pricing.platform_rates`, `pricing.provider_rates`: the market's prices, the newest of each kept.
 *
 * Every kind is idempotent and order-free, so redeliveries and duplicates are harmless. A message about a machine the
 * registry does not know can never apply (`term`); a malformed one is refused by its schema; any other failure (the
 * database away) is tried again. Other kinds on billing's stream (a running session's events) are acknowledged and
 * change nothing. The kinds are common's `REGISTRY_MESSAGE_KINDS`, which billing's HTTP transport sends.
 *
 * Messages act as the billing service (a `service` principal): only billing publishes on its stream, which the NATS
 * server's permissions enforce in a deployment, and only platform services post to the inbox.
 */
import {
  type DurableConsumer,
  isAppError,
  type Logger,
  MessageBus,
  type NatsPublisher,
  onMessage,
  type Principal,
  startBusConsumer,
} from '@gpu/common';
import type { GpuHolds } from '../domain/gpu-holds.ts';
import type { Market } from '../domain/market.ts';
import { gpusHeldEventSchema, sessionEndedEventSchema } from '../wire/gpu-holds.ts';
import { platformRatesEventSchema, providerRatesEventSchema, toPriceCard, toProviderPrices } from '../wire/prices.ts';

/** Who a message of billing's acts as (billing: a platform service). */
const BILLING: Principal = Object.freeze({
  subject: 'billing-events',
  kind: 'client' as const,
  roles: ['service' as const],
  tokenId: 'nats-billing-events',
});

export interface BillingMessageDeps {
  holds: GpuHolds;
  market: Market;
  logger: Logger;
}

/** `apply`; a machine the registry does not know can never apply: logged, and `term`. */
async function unlessUnknown(logger: Logger, what: Record<string, unknown>, apply: () => Promise<unknown>) {
  try {
    await apply();
  } catch (err) {
    if (!isAppError(err) || err.code !== 'PROVIDER_NOT_FOUND') throw err;
    logger.info(what, 'a message about an unknown provider ignored');
    return 'term' as const;
  }
}

/** The registry's bus of billing's messages. */
export function billingMessages({ holds, market, logger }: BillingMessageDeps): MessageBus {
  const sessionEnded = (kind: 'session.completed' | 'session.terminated') =>
    onMessage({
      kind,
      schema: sessionEndedEventSchema(kind),
      handle: ({ session }) =>
        unlessUnknown(logger, { session_id: session.id, provider_id: session.provider_id }, () =>
          holds.countEnd(BILLING, {
            providerId: session.provider_id,
            sessionId: session.id,
            endReason: session.end_reason,
            renterId: session.user_id,
          }),
        ),
    });

  return new MessageBus([
    onMessage({
      kind: 'lease.held',
      schema: gpusHeldEventSchema,
      handle: (m, meta) =>
        unlessUnknown(logger, { provider_id: m.provider_id, version: m.version }, () =>
          holds.state(BILLING, {
            providerId: m.provider_id,
            version: m.version,
            gpuIndices: [...m.gpu_indices].sort((a, b) => a - b),
            bids: m.bids,
            correlationId: meta.correlationId,
          }),
        ),
    }),
    sessionEnded('session.completed'),
    sessionEnded('session.terminated'),
    onMessage({
      kind: 'pricing.platform_rates',
      schema: platformRatesEventSchema,
      handle: async (m) => {
        await market.setPriceCard(BILLING, toPriceCard(m.card), new Date(m.card.occurred_at));
      },
    }),
    onMessage({
      kind: 'pricing.provider_rates',
      schema: providerRatesEventSchema,
      handle: async (m) => {
        const stored = await market.setProviderPrices(
          BILLING,
          m.provider_id,
          toProviderPrices(m.rates),
          new Date(m.rates.occurred_at),
        );
        if (!stored) logger.debug({ provider_id: m.provider_id }, 'rates of an unknown machine, or older, ignored');
      },
    }),
  ]);
}

export interface BillingConsumersOptions {
  connection: NatsPublisher['connection'];
  bus: MessageBus;
  /** Billing's event subject prefix (`billing.events`). */
  prefix: string;
  /** The durable consumers' names: of sessions' events, of held GPUs, of prices. */
  durables: { sessions: string; leases: string; prices: string };
  logger: Logger;
}

/**
 * The bus over billing's stream: a durable consumer per family of subjects (`<prefix>.session.>`, `.lease.>`,
 * `.pricing.>`), each started in the background once billing has made its stream (whatever its name).
 */
export function startBillingConsumers(opts: BillingConsumersOptions): DurableConsumer[] {
  const families = [
    { name: 'session event consumer', durable: opts.durables.sessions, subjects: 'session', ackWaitMs: 30_000 },
    { name: 'held GPUs consumer', durable: opts.durables.leases, subjects: 'lease', ackWaitMs: 30_000 },
    // A new card prices every offer again: it may take longer.
    { name: 'price event consumer', durable: opts.durables.prices, subjects: 'pricing', ackWaitMs: 60_000 },
  ];
  return families.map((f) =>
    startBusConsumer({
      connection: opts.connection,
      bus: opts.bus,
      name: f.name,
      durable: f.durable,
      filter: `${opts.prefix}.${f.subjects}.>`,
      stream: { await: "billing's event stream" },
      ackWaitMs: f.ackWaitMs,
      logger: opts.logger,
    }),
  );
}
