/**
 * buildApp(deps): the billing service's HTTP wiring. Never listens; tests
 * inject or listen on port 0 themselves.
 */
import { type App, createApp, type Logger } from '@gpu/common';
import type { Kysely } from 'kysely';
import type { Chain } from './adapters/chain.ts';
import type { BillingConfig } from './config.ts';
import type { BillingDB } from './db/schema.ts';
import type { BillingContext } from './domain/context.ts';
import { type EventSink, noEvents } from './domain/events.ts';
import { paymentRoutes } from './routes/payments.ts';
import { providerRoutes } from './routes/providers.ts';
import { walletRoutes } from './routes/wallets.ts';

export const SERVICE_NAME = 'billing-service';

export interface BillingDeps {
  config: BillingConfig;
  logger: Logger;
  db: Kysely<BillingDB>;
  /** Null when the blockchain section is not configured (deposits and withdrawals answer 503). */
  chain: Chain | null;
  /** Where events are recorded (the outbox when NATS is configured). */
  events?: EventSink;
  /** Extra health checks (e.g. NATS). */
  healthChecks?: Record<string, () => Promise<unknown>>;
}

/** The domain context the routes and background jobs share. */
export function billingContext(deps: BillingDeps): BillingContext {
  return {
    db: deps.db,
    chain: deps.chain,
    events: deps.events ?? noEvents,
    logger: deps.logger,
    scale: deps.config.blockchain.token_decimals,
    commitment: deps.config.blockchain.commitment,
    minimumPayout: deps.config.billing.minimum_payout,
  };
}

export async function buildApp(deps: BillingDeps, context: BillingContext = billingContext(deps)): Promise<App> {
  const app = await createApp({
    service: SERVICE_NAME,
    description:
      'Billing service of the GPU rental platform: token wallets on an exact double-entry ledger, Solana ' +
      'deposits, withdrawals and provider payouts.',
    config: deps.config,
    logger: deps.logger,
    healthChecks: {
      database: async () => {
        await deps.db.selectFrom('billing_meta').select('key').limit(1).execute();
      },
      ...(deps.chain ? { solana: () => deps.chain!.ping() } : {}),
      ...deps.healthChecks,
    },
  });
  const routeDeps = { config: deps.config, logger: deps.logger, billing: context };
  await app.register(walletRoutes, routeDeps);
  await app.register(paymentRoutes, routeDeps);
  await app.register(providerRoutes, routeDeps);
  return app;
}
