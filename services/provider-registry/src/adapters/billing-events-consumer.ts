/**
 * Billing's messages about machines into the registry: durable JetStream pull consumers (common's
 * `startDurableConsumer`) on billing's stream `BILLING_EVENTS`, explicit ack, one event after another:
 *
 * - `provider-registry-leases` (subjects `<billing events prefix>.lease.>`): billing's statement of a machine's held
 *   GPUs (`lease.held`), kept when it is the newest (domain/gpu-holds.ts);
 * - `provider-registry-sessions` (`<prefix>.session.>`): a rental's end (`session.completed`, `session.terminated`),
 *   counted once in the machine's reliability; a running session's events are acknowledged and change nothing.
 *
 * Both are idempotent and order-free, so redeliveries and duplicates are harmless. An event that can never apply is
 * settled and logged (malformed, or its provider ID not a UUID: terminated; about a provider the registry does not
 * know: acknowledged); any other failure (the database away) is nak'ed and redelivered later.
 *
 * Messages on billing's stream act as the billing service (a `service` principal): only billing publishes there,
 * which the NATS server's permissions enforce in a deployment.
 */
import {
  type DurableConsumer,
  isAppError,
  type Logger,
  type NatsPublisher,
  type Principal,
  startDurableConsumer,
} from '@gpu/common';
import type { JsMsg } from '@nats-io/jetstream';
import type { GpuHolds } from '../domain/gpu-holds.ts';
import type { Market } from '../domain/market.ts';
import { gpusHeldEventSchema, sessionEventSchema } from '../wire/gpu-holds.ts';
import { priceEventSchema, toPriceCard, toProviderPrices } from '../wire/prices.ts';

/** Who a message of billing's stream acts as (billing: a platform service). */
const BILLING_EVENTS_PRINCIPAL: Principal = Object.freeze({
  subject: 'billing-events',
  kind: 'client' as const,
  roles: ['service' as const],
  tokenId: 'nats-billing-events',
});

export interface HoldConsumerOptions {
  connection: NatsPublisher['connection'];
  holds: GpuHolds;
  /** Billing's event subject prefix (`billing.events`). */
  prefix: string;
  durable?: string;
  logger: Logger;
}

export interface SessionConsumer extends Pick<DurableConsumer, 'durable' | 'pending'> {
  stop(): Promise<void>;
}

/** Runs `apply`; a provider the registry does not know is acknowledged (and logged). */
async function unlessUnknown(
  opts: HoldConsumerOptions,
  what: Record<string, unknown>,
  apply: () => Promise<unknown>,
): Promise<'ack'> {
  try {
    await apply();
  } catch (err) {
    if (!isAppError(err) || err.code !== 'PROVIDER_NOT_FOUND') throw err;
    opts.logger.info(what, 'an event about an unknown provider ignored');
  }
  return 'ack';
}

/** Billing's statements of machines' held GPUs; starts in the background once billing has made its stream. */
export function startHoldConsumer(opts: HoldConsumerOptions): SessionConsumer {
  return startDurableConsumer({
    connection: opts.connection,
    name: 'held GPUs consumer',
    what: 'held GPUs event',
    durable: opts.durable ?? 'provider-registry-leases',
    filter: `${opts.prefix}.lease.>`,
    stream: { await: "billing's event stream" },
    ackWaitMs: 30_000,
    schema: gpusHeldEventSchema,
    handle: (event, msg: JsMsg) =>
      unlessUnknown(opts, { provider_id: event.provider_id, version: event.version }, () =>
        opts.holds.state(BILLING_EVENTS_PRINCIPAL, {
          providerId: event.provider_id,
          version: event.version,
          gpuIndices: [...event.gpu_indices].sort((a, b) => a - b),
          correlationId: msg.headers?.get('X-Correlation-ID') || undefined,
        }),
      ),
    logger: opts.logger,
  });
}

/** Rentals' ends, for the machines' reliability; starts in the background once billing has made its stream. */
export function startSessionConsumer(opts: HoldConsumerOptions): SessionConsumer {
  return startDurableConsumer({
    connection: opts.connection,
    name: 'session event consumer',
    what: 'session event',
    durable: opts.durable ?? 'provider-registry-sessions',
    filter: `${opts.prefix}.session.>`,
    stream: { await: "billing's event stream" },
    ackWaitMs: 30_000,
    schema: sessionEventSchema,
    handle: async (event) => {
      if (!('session' in event)) return 'ack';
      const { id, provider_id, user_id, end_reason } = event.session;
      return unlessUnknown(opts, { session_id: id, provider_id }, () =>
        opts.holds.countEnd(BILLING_EVENTS_PRINCIPAL, {
          providerId: provider_id,
          sessionId: id,
          endReason: end_reason,
          renterId: user_id,
        }),
      );
    },
    logger: opts.logger,
  });
}

export interface PriceConsumerOptions {
  connection: NatsPublisher['connection'];
  market: Market;
  /** Billing's event subject prefix: price events arrive on `<prefix>.pricing.<what>`. */
  prefix: string;
  durable?: string;
  logger: Logger;
}

/**
 * Billing's price events into the market (`provider-registry-prices` on billing's stream, subjects
 * `<prefix>.pricing.>`): the platform's card and machines' own rates, the newest of each kept and the offers they touch
 * priced again. A machine the registry does not know has nothing to price: acknowledged.
 */
export function startPriceConsumer(opts: PriceConsumerOptions): SessionConsumer {
  return startDurableConsumer({
    connection: opts.connection,
    name: 'price event consumer',
    what: 'price event',
    durable: opts.durable ?? 'provider-registry-prices',
    filter: `${opts.prefix}.pricing.>`,
    stream: { await: "billing's event stream" },
    ackWaitMs: 60_000,
    schema: priceEventSchema,
    handle: async (event) => {
      if (event.kind === 'pricing.platform_rates') {
        await opts.market.setPriceCard(
          BILLING_EVENTS_PRINCIPAL,
          toPriceCard(event.card),
          new Date(event.card.occurred_at),
        );
      } else {
        const stored = await opts.market.setProviderPrices(
          BILLING_EVENTS_PRINCIPAL,
          event.provider_id,
          toProviderPrices(event.rates),
          new Date(event.rates.occurred_at),
        );
        if (!stored)
          opts.logger.debug({ provider_id: event.provider_id }, 'rates of an unknown machine, or older, ignored');
      }
      return 'ack';
    },
    logger: opts.logger,
  });
}
