/**
 * The service's background work: publishing outbox events (common's
 * OutboxRelay), reconciling pending withdrawals and payouts with the chain
 * (once at start-up, then every `billing.reconcile_interval`), billing running
 * sessions every `billing.billing_interval` (domain/sessions/biller.ts), consuming
 * usage updates and the storage service's usage reports from NATS when messaging is configured, and the registry's
 * provider status changes (an offline provider's sessions end); and, at start-up, announcing the platform's price
 * card and machines' own rates to the market.
 */
import {
  durationMs,
  type EventPublisher,
  NatsPublisher,
  type Outbox,
  OutboxRelay,
  type TokenVerifier,
} from '@gpu/common';
import type { Metric } from 'prom-client';
import { type RegistryEventsConsumer, startRegistryEventsConsumer } from './adapters/registry-events-consumer.ts';
import { type StorageUsageConsumer, startStorageUsageConsumer } from './adapters/storage-usage-consumer.ts';
import { startUsageConsumer, type UsageConsumer } from './adapters/usage-consumer.ts';
import type { BillingConfig } from './config.ts';
import type { BillingContext } from './domain/context.ts';
import { announcePrices } from './domain/pricing/index.ts';
import { checkRunningProviders, runBillingCycle } from './domain/sessions/index.ts';
import { reconcilePending, settleAutoPayouts, sweepAutoPayouts } from './domain/wallets/index.ts';

export interface Background {
  stop(): Promise<void>;
  /** Metrics of background work, for the app's registry. */
  metrics: Metric[];
  /** Health checks of background work that must run (the NATS usage consumer). */
  healthChecks: Record<string, () => Promise<unknown>>;
}

/**
 * How often billing looks up the machines with running sessions at the registry: `provider_check_interval` without
 * NATS, where it is how billing learns that one stopped; `provider_recheck_interval` with NATS, as a backstop to the
 * registry's events (one handled while a session on that machine was still being started ends nothing).
 */
export function providerCheckEveryMs(config: BillingConfig, statusEvents: boolean): number {
  return durationMs(statusEvents ? config.billing.provider_recheck_interval : config.billing.provider_check_interval);
}

export async function startBackground(
  ctx: BillingContext,
  config: BillingConfig,
  publisher: EventPublisher,
  outbox: Outbox | undefined,
  verifier: TokenVerifier | null,
): Promise<Background> {
  const relay = publisher.enabled
    ? new OutboxRelay(ctx.db, publisher, { subject: config.messaging.subjects.events, logger: ctx.logger })
    : null;
  relay?.start(1000, outbox);
  // The market learns billing's prices from billing: announced at every start (the registry keeps the newest).
  await announcePrices(ctx).catch((err) =>
    ctx.logger.warn({ err: (err as Error).message }, 'announcing the prices failed'),
  );

  let reconciling: Promise<unknown> | undefined;
  const reconcile = (minAgeMs: number) => {
    reconciling ??= reconcilePending(ctx, minAgeMs)
      .catch((err) => ctx.logger.warn({ err: (err as Error).message }, 'reconciliation failed; will retry'))
      .finally(() => {
        reconciling = undefined;
      });
    return reconciling;
  };
  await reconcile(0);
  const every = durationMs(config.billing.reconcile_interval);
  // Records younger than the confirm timeout may still be in the hands of the request that created them.
  const minAge = durationMs(config.blockchain.confirm_timeout) + 5000;
  const timer = every > 0 ? setInterval(() => void reconcile(minAge), every) : undefined;
  timer?.unref();

  // Automatic payouts that came due without a nudge (a session ended by the biller or an offline provider, an
  // instance stopped in between): a round of their own, so a slow payout never holds up the reconciliation.
  let sweeping: Promise<unknown> | undefined;
  const sweepTimer =
    every > 0
      ? setInterval(() => {
          sweeping ??= sweepAutoPayouts(ctx)
            .catch((err) => ctx.logger.warn({ err: (err as Error).message }, 'automatic payouts failed; will retry'))
            .finally(() => {
              sweeping = undefined;
            });
        }, every)
      : undefined;
  sweepTimer?.unref();

  let billing: Promise<unknown> | undefined;
  const bill = () => {
    billing ??= runBillingCycle(ctx)
      .catch((err) => ctx.logger.warn({ err: (err as Error).message }, 'billing cycle failed; will retry'))
      .finally(() => {
        billing = undefined;
      });
    return billing;
  };
  const billEvery = ctx.sessions.billingIntervalMs;
  const billTimer = billEvery > 0 ? setInterval(() => void bill(), billEvery) : undefined;
  billTimer?.unref();

  const consumer: UsageConsumer | null =
    publisher instanceof NatsPublisher
      ? await startUsageConsumer({
          connection: publisher.connection,
          ctx,
          verifier,
          prefix: config.messaging.subjects.usage,
          stream: config.messaging.usage_stream,
          durable: config.messaging.usage_consumer,
          ackWaitMs: durationMs(config.messaging.usage_ack_wait),
          logger: ctx.logger,
        })
      : null;

  // Stored bytes, billed: the storage service's reports (domain/storage/charges.ts), as over HTTP.
  const storageUsage: StorageUsageConsumer | null =
    publisher instanceof NatsPublisher
      ? await startStorageUsageConsumer({
          connection: publisher.connection,
          ctx,
          verifier,
          prefix: config.messaging.subjects.storage_usage,
          stream: config.messaging.storage_usage_stream,
          durable: config.messaging.storage_usage_consumer,
          logger: ctx.logger,
        })
      : null;

  // A provider that goes offline or into error stops costing (domain/sessions/provider-offline.ts).
  const statuses: RegistryEventsConsumer | null =
    publisher instanceof NatsPublisher
      ? startRegistryEventsConsumer({
          connection: publisher.connection,
          ctx,
          subject: config.messaging.subjects.provider_status,
          durable: config.messaging.provider_status_consumer,
          logger: ctx.logger,
        })
      : null;

  // Without NATS no status event arrives: ask the registry about the machines with running sessions instead. With
  // NATS, ask now and then all the same (providerCheckEveryMs).
  let checking: Promise<unknown> | undefined;
  const checkEvery = providerCheckEveryMs(config, statuses !== null);
  const checkTimer =
    ctx.providers && checkEvery > 0
      ? setInterval(() => {
          checking ??= checkRunningProviders(ctx)
            .catch((err) => ctx.logger.warn({ err: (err as Error).message }, 'provider check failed; will retry'))
            .finally(() => {
              checking = undefined;
            });
        }, checkEvery)
      : undefined;
  checkTimer?.unref();

  return {
    healthChecks: {
      ...(consumer ? { usage_consumer: () => consumer.check() } : {}),
      ...(storageUsage ? { storage_usage_consumer: () => storageUsage.check() } : {}),
      ...(statuses ? { provider_status_consumer: () => statuses.check() } : {}),
    },
    metrics: [...(consumer?.metrics ?? []), ...(storageUsage?.metrics ?? [])],
    async stop() {
      clearInterval(timer);
      clearInterval(sweepTimer);
      clearInterval(billTimer);
      clearInterval(checkTimer);
      await checking;
      await consumer?.stop();
      await storageUsage?.stop();
      await statuses?.stop();
      await billing;
      await reconciling;
      await sweeping;
      await settleAutoPayouts(ctx);
      await relay?.stop();
    },
  };
}
