/**
 * Billing's session events into the registry: a durable JetStream pull consumer (common's `startDurableConsumer`;
 * `provider-registry-sessions` on billing's stream `BILLING_EVENTS`, subjects `<billing events prefix>.session.>`,
 * explicit ack) that reports each session's start or end to `ProviderSessions`, which keeps rented providers `busy`
 * (domain/provider-sessions.ts).
 *
 * `session.started`, `session.grace_period`, `session.resumed` and `session.low_balance` say the session runs, holding
 * the GPUs its `session.gpu_indices` names (null or absent: every GPU of the machine; one schema with billing's HTTP
 * reports: wire/sessions.ts); `session.completed` and `session.terminated` that it ended. Reports are idempotent and order-free, so redeliveries and duplicates are
 * harmless. An event that can never apply is settled and logged (malformed, or its provider ID not a UUID:
 * terminated; about a provider the registry does not know: acknowledged); any other failure (the database away) is
 * nak'ed and redelivered later.
 *
 * Billing's reservation events reach the same function through a consumer of their own (`startLeaseConsumer`).
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
import type { Market } from '../domain/market.ts';
import type { ProviderSessions, SessionReportInput } from '../domain/provider-sessions.ts';
import { priceEventSchema, toPriceCard, toProviderPrices } from '../wire/prices.ts';
import { leaseEventSchema, sessionEventSchema, toLeaseReport, toSessionReport } from '../wire/sessions.ts';

const SESSION_CONSUMER = 'provider-registry-sessions';

/** Who a message of billing's stream acts as (billing: a platform service). */
const BILLING_EVENTS_PRINCIPAL: Principal = Object.freeze({
  subject: 'billing-events',
  kind: 'client' as const,
  roles: ['service' as const],
  tokenId: 'nats-billing-events',
});

export interface SessionConsumerOptions {
  connection: NatsPublisher['connection'];
  sessions: ProviderSessions;
  /** Billing's event subject prefix (`billing.events`): session events arrive on `<prefix>.session.<what>`. */
  prefix: string;
  durable?: string;
  logger: Logger;
}

export interface SessionConsumer extends Pick<DurableConsumer, 'durable' | 'pending'> {
  stop(): Promise<void>;
}

/** Reports a session or reservation to `ProviderSessions`; a provider the registry does not know is acknowledged. */
async function reportOf(opts: SessionConsumerOptions, report: SessionReportInput, msg: JsMsg): Promise<'ack'> {
  try {
    await opts.sessions.report(BILLING_EVENTS_PRINCIPAL, {
      ...report,
      correlationId: msg.headers?.get('X-Correlation-ID') || undefined,
    });
  } catch (err) {
    if (!isAppError(err) || err.code !== 'PROVIDER_NOT_FOUND') throw err;
    opts.logger.info(
      { session_id: report.sessionId, provider_id: report.providerId, kind: report.kind ?? 'session' },
      'lease event about an unknown provider ignored',
    );
  }
  return 'ack';
}

/** Starts in the background, one event after another, once billing has made its stream (whatever its name). */
export function startSessionConsumer(opts: SessionConsumerOptions): SessionConsumer {
  return startDurableConsumer({
    connection: opts.connection,
    name: 'session event consumer',
    what: 'session event',
    durable: opts.durable ?? SESSION_CONSUMER,
    filter: `${opts.prefix}.session.>`,
    stream: { await: "billing's event stream" },
    ackWaitMs: 30_000,
    schema: sessionEventSchema,
    handle: (event, msg: JsMsg) => reportOf(opts, toSessionReport(event), msg),
    logger: opts.logger,
  });
}

/**
 * Billing's reservation events (`provider-registry-leases` on billing's stream, subjects `<prefix>.lease.>`):
 * `lease.reserved` holds the reservation's GPUs until its `expires_at` (restated when a start took some of them),
 * `lease.released` frees them (used or cancelled). A consumer of its own beside the sessions': a reservation and a
 * session never hold one GPU at billing, and the registry counts a GPU taken while either holds it, so the order
 * between the two streams of reports does not matter.
 */
export function startLeaseConsumer(opts: SessionConsumerOptions): SessionConsumer {
  return startDurableConsumer({
    connection: opts.connection,
    name: 'reservation event consumer',
    what: 'reservation event',
    durable: opts.durable ?? 'provider-registry-leases',
    filter: `${opts.prefix}.lease.>`,
    stream: { await: "billing's event stream" },
    ackWaitMs: 30_000,
    schema: leaseEventSchema,
    handle: (event, msg: JsMsg) => reportOf(opts, toLeaseReport(event), msg),
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
