/**
 * buildApp(deps): the billing service's HTTP wiring. Never listens; tests
 * inject or listen on port 0 themselves.
 */

import fastifyWebsocket from '@fastify/websocket';
import {
  type App,
  auditHook,
  auditTrailRoute,
  createApp,
  DEFAULT_BASE_RATES,
  durationMs,
  type Logger,
  Outbox,
  type TokenVerifier,
} from '@gpu/common';
import type { Kysely } from 'kysely';
import { configuredAuthService } from './adapters/auth-service.ts';
import { outboxEvents } from './adapters/billing-events.ts';
import { configuredDirectory } from './adapters/provider-registry.ts';
import { watchReserves } from './adapters/reserve-metrics.ts';
import { configuredStorage } from './adapters/storage-grants.ts';
import type { BillingConfig } from './config.ts';
import { pingBillingDatabase } from './db/open.ts';
import type { BillingDB } from './db/schema.ts';
import type { Chain } from './domain/chain/index.ts';
import { type BillingContext, newBillingState } from './domain/context.ts';
import { Dec } from './domain/ledger/index.ts';
import { type MarketFactors, neutralMarket, normalizeModel } from './domain/pricing/index.ts';
import type { ProviderDirectory } from './domain/provider-directory.ts';
import { HostKey, liveSessions, PortGrants, ReachRelay } from './domain/reach/index.ts';
import { payoutPause } from './domain/reserves/index.ts';
import type { WorkloadStorage } from './domain/workload-storage.ts';
import { eventRoutes } from './routes/events.ts';
import { jobRoutes } from './routes/jobs.ts';
import { paymentRoutes } from './routes/payments.ts';
import { portLinkRoutes } from './routes/port-links.ts';
import { pricingRoutes } from './routes/pricing.ts';
import { providerRoutes } from './routes/providers.ts';
import { chooseProtocol, reachRoutes } from './routes/reach.ts';
import { portHostRewrite, reachPortRoutes } from './routes/reach-ports.ts';
import { reservationRoutes } from './routes/reservations.ts';
import { reserveRoutes } from './routes/reserves.ts';
import { schemas } from './routes/schemas.ts';
import { sessionRoutes } from './routes/sessions.ts';
import { storageRoutes } from './routes/storage.ts';
import { usageRoutes } from './routes/usage.ts';
import { walletRoutes } from './routes/wallets.ts';
import { workloadRoutes } from './routes/workloads.ts';

export const SERVICE_NAME = 'billing-service';

export interface BillingDeps {
  config: BillingConfig;
  logger: Logger;
  db: Kysely<BillingDB>;
  /** Null when the blockchain section is not configured (deposits and withdrawals answer 503). */
  chain: Chain | null;
  /** Where events are recorded, in the transaction of their change (`Outbox.disabled` without NATS; the default). */
  outbox?: Outbox;
  /** Extra health checks (e.g. NATS). */
  healthChecks?: Record<string, () => Promise<unknown>>;
  /** Demand and supply factors of pricing (both 1.0 when absent). */
  market?: MarketFactors;
  /** The clock sessions are billed by (the system clock when absent). */
  now?: () => Date;
  /** The verifier of access tokens, shared with the NATS usage consumer (built from `access` when absent). */
  verifier?: TokenVerifier;
  /** Who owns provider machines; the registry of `provider_registry` when absent (none when its URL is empty). */
  providers?: ProviderDirectory | null;
  /** Where workloads' files live; the storage service of `storage` when absent (none when its URL is empty). */
  storage?: WorkloadStorage | null;
}

/** Model names normalised; a table without `default` gets the contract's default rate. */
function normalizeRateTable(table: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = { default: DEFAULT_BASE_RATES.default! };
  for (const [model, rate] of Object.entries(table)) out[normalizeModel(model)] = rate;
  return out;
}

/** The domain context the routes and background jobs share. */
export function billingContext(deps: BillingDeps): BillingContext {
  const scale = deps.config.blockchain.token_decimals;
  const state = newBillingState();
  return {
    db: deps.db,
    chain: deps.chain,
    providers: deps.providers !== undefined ? deps.providers : configuredDirectory(deps.config.provider_registry),
    storage: deps.storage !== undefined ? deps.storage : configuredStorage(deps.config),
    events: outboxEvents(deps.outbox ?? Outbox.disabled, { scale, state }),
    logger: deps.logger,
    scale,
    commitment: deps.config.blockchain.commitment,
    minimumPayout: deps.config.billing.minimum_payout,
    tokenAccountFee: new Dec(deps.config.billing.token_account_fee).toDecimalPlaces(scale, Dec.ROUND_UP).toFixed(),
    withdrawalLimit:
      deps.config.billing.withdrawals_per_hour > 0 ? { perHour: deps.config.billing.withdrawals_per_hour } : null,
    pricing: {
      card: {
        baseRates: normalizeRateTable(deps.config.pricing.base_rates),
        vramRatePerGbHour: deps.config.pricing.vram_rate_per_gb_hour,
        powerRatePerWattHour: deps.config.pricing.power_rate_per_watt_hour,
      },
      platformFeePercent: deps.config.pricing.platform_fee_percent,
      storageRatePerGbHour: deps.config.pricing.storage_rate_per_gb_hour,
      market: deps.market ?? neutralMarket,
      providerLimits: {
        baseRate: deps.config.pricing.provider_rate_limits.base_rate,
        vramRatePerGbHour: deps.config.pricing.provider_rate_limits.vram_rate_per_gb_hour,
        powerRatePerWattHour: deps.config.pricing.provider_rate_limits.power_rate_per_watt_hour,
      },
    },
    sessions: {
      initialPeriodMs: durationMs(deps.config.billing.initial_period),
      holdTopUpBelowMs: durationMs(deps.config.billing.hold_top_up_below),
      lowBalanceWarningMs: durationMs(deps.config.billing.low_balance_warning),
      minimumBalance: deps.config.billing.minimum_balance,
      gracePeriodMs: durationMs(deps.config.billing.grace_period),
      billingIntervalMs: durationMs(deps.config.billing.billing_interval),
      maxClockSkewMs: durationMs(deps.config.billing.max_clock_skew),
      workloadStartTimeoutMs: durationMs(deps.config.billing.workload_start_timeout),
      workloadUploadWindowMs: durationMs(deps.config.billing.workload_upload_window),
      preemptionGraceMs: durationMs(deps.config.billing.preemption_grace),
    },
    now: deps.now ?? (() => new Date()),
    state,
  };
}

/** Paused withdrawals and payouts in the health answer: named for operators, never a failure of the service. */
async function payoutsHealth(ctx: BillingContext): Promise<{ detail: string } | undefined> {
  const pause = await payoutPause(ctx);
  if (!pause) return undefined;
  return { detail: `withdrawals and payouts paused since ${pause.since.toISOString()} (${pause.cause})` };
}

export async function buildApp(deps: BillingDeps, context: BillingContext = billingContext(deps)): Promise<App> {
  const app = await createApp({
    service: SERVICE_NAME,
    description:
      'Billing service of the GPU rental platform: token wallets on an exact double-entry ledger, Solana ' +
      'deposits, withdrawals and provider payouts, pricing, and metered GPU rental sessions billed per minute.',
    config: deps.config,
    logger: deps.logger,
    verifier: deps.verifier,
    // Ready while its database answers: NATS, the chain and the consumers are in /health, and their outages are ridden
    // out (the outbox, the daemons' HTTP path), so they take no instance out of a load balancer.
    readinessChecks: ['database'],
    healthChecks: {
      database: () => pingBillingDatabase(deps.db),
      ...(deps.chain ? { solana: () => deps.chain!.ping(), payouts: () => payoutsHealth(context) } : {}),
      ...deps.healthChecks,
    },
    schemas,
    // A workload port's own host: every path there is the workload's (routes/reach-ports.ts).
    rewriteUrl: portHostRewrite,
  });
  // The proof of reserves' metrics, from every check for the record (an admin's at once).
  if (deps.chain) {
    watchReserves(context, app.metrics, {
      checkedInBackground: durationMs(deps.config.billing.reserve_check_interval) > 0,
    });
  }
  // Every answer of a route that moves money out or changes who gets it, in the audit trail (its config's `audit`).
  await app.register(auditHook, { db: deps.db as unknown as Kysely<never> });
  const routeDeps = { config: deps.config, logger: deps.logger, billing: context };
  await app.register(walletRoutes, routeDeps);
  await app.register(paymentRoutes, routeDeps);
  await app.register(providerRoutes, routeDeps);
  await app.register(pricingRoutes, routeDeps);
  await app.register(sessionRoutes, routeDeps);
  await app.register(jobRoutes, routeDeps);
  await app.register(eventRoutes, routeDeps);
  await app.register(usageRoutes, routeDeps);
  await app.register(storageRoutes, routeDeps);
  await app.register(reservationRoutes, routeDeps);
  await app.register(workloadRoutes, routeDeps);
  await app.register(reserveRoutes, routeDeps);
  // Reach: daemons' connections and renters' streams into their workloads, WebSockets (routes/reach.ts).
  await app.register(fastifyWebsocket, {
    options: { maxPayload: 4 * 1024 * 1024, handleProtocols: chooseProtocol },
  });
  // The auth service, for renters' SSH keys and whether the credentials behind open streams still hold.
  const authService = configuredAuthService(deps.config.provider_registry);
  const relay = new ReachRelay({
    db: deps.db,
    config: deps.config,
    logger: deps.logger,
    instanceId: deps.config.instance_id,
    live: (ids) => liveSessions(deps.db, ids),
    credentialsLive: authService?.credentialsLive ?? null,
  });
  app.addHook('onListen', async function listening() {
    const address = this.server.address();
    if (address && typeof address === 'object') relay.listening(address.port);
  });
  app.addHook('onReady', async () => relay.start());
  app.addHook('preClose', async () => relay.stop());
  await app.register(reachRoutes, {
    ...routeDeps,
    relay,
    hostKey: new HostKey(deps.db, deps.config.reach.ssh_host_key),
    sshKeys: authService?.sshKeys ?? null,
  });
  const grants = new PortGrants(context, authService?.credentialsLive ?? null, deps.config.reach.port_grant_ttl);
  await app.register(reachPortRoutes, { ...routeDeps, relay, grants });
  await app.register(portLinkRoutes, routeDeps);
  auditTrailRoute(app, {
    db: deps.db as unknown as Kysely<never>,
    url: '/api/v1/billing/audit',
    schemas,
    examples:
      'withdrawal, deposit, payout (automatic ones too), payout_settings_changed, rates_changed, payouts_paused, payouts_resumed',
    outcomes: {
      values: ['requested', 'succeeded', 'refused', 'failed'],
      describe:
        'requested: written before the action, whose later events name it (details.requested); one that nothing ' +
        'names was cut short (the ledger says whether it happened); succeeded; refused: not allowed, or the request ' +
        'was wrong; failed: the service could not do it',
    },
  });
  return app;
}
