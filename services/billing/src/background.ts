/**
 * The service's background work: publishing outbox events (common's
 * OutboxRelay), reconciling pending withdrawals and payouts with the chain
 * (once at start-up, then every `billing.reconcile_interval`), billing running
 * sessions every `billing.billing_interval` (domain/sessions/biller.ts), checking the reserves every
 * `billing.reserve_check_interval` (domain/reserves/: a gap pauses withdrawals and payouts), consuming
 * usage updates and the storage service's usage reports from NATS when messaging is configured, and the registry's
 * provider status changes (an offline provider's sessions end); and, at start-up, announcing the platform's price
 * card and machines' own rates to the market.
 */
import {
  auditRound,
  consumerPendingGauge,
  durationMs,
  type EventPublisher,
  NatsPublisher,
  natsConnectedGauge,
  type Outbox,
  OutboxRelay,
  type TokenVerifier,
} from '@gpu/common';
import type { Metric } from 'prom-client';
import { opsMetrics } from './adapters/ops-metrics.ts';
import { type RegistryEventsConsumer, startRegistryEventsConsumer } from './adapters/registry-events-consumer.ts';
import { type StorageUsageConsumer, startStorageUsageConsumer } from './adapters/storage-usage-consumer.ts';
import { startUsageConsumer, type UsageConsumer } from './adapters/usage-consumer.ts';
import type { BillingConfig } from './config.ts';
import type { BillingContext } from './domain/context.ts';
import { followJobs, nextQueueDeadline, placeJobs } from './domain/jobs/index.ts';
import { expireReservations } from './domain/leases/index.ts';
import { announcePrices } from './domain/pricing/index.ts';
import { purgeExpiredGrants } from './domain/reach/index.ts';
import { checkReserves } from './domain/reserves/index.ts';
import {
  checkRunningProviders,
  endSessionsAtCap,
  purgeOldSessionEvents,
  purgeOldUsageRecords,
  runBillingCycle,
} from './domain/sessions/index.ts';
import { reconcilePending, settleAutoPayouts, sweepAutoPayouts } from './domain/wallets/index.ts';
import { endWorkloadsNeverStarted } from './domain/workloads/index.ts';

/** How often each instance looks for reservations lapsed that it set no timer for (another instance made them). */
const RESERVATION_SWEEP_MS = 1_000;

/** The soonest a jobs round runs again for a queued job's queue timeout. */
const QUEUE_DEADLINE_MIN_MS = 100;

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

  const rounds: Round[] = [];
  /** A round of work every `ms` (none when 0), one run at a time; a failure is logged and the next run retries. */
  const every = (ms: number, failed: string, work: () => Promise<unknown>) => {
    rounds.push(new Round(work, (err) => ctx.logger.warn({ err: (err as Error).message }, failed), ms));
  };

  // Withdrawals and payouts left pending: at start-up, then every reconcile_interval. Records younger than the
  // confirm timeout may still be in the hands of the request that created them.
  const reconcileEvery = durationMs(config.billing.reconcile_interval);
  const minAge = durationMs(config.blockchain.confirm_timeout) + 5000;
  await reconcilePending(ctx, 0).catch((err) =>
    ctx.logger.warn({ err: (err as Error).message }, 'reconciliation failed; will retry'),
  );
  every(reconcileEvery, 'reconciliation failed; will retry', () => reconcilePending(ctx, minAge));
  // Automatic payouts that came due without a nudge (a session ended by the biller or an offline provider, an
  // instance stopped in between): a round of their own, so a slow payout never holds up the reconciliation.
  every(reconcileEvery, 'automatic payouts failed; will retry', () => sweepAutoPayouts(ctx));
  every(ctx.sessions.billingIntervalMs, 'billing cycle failed; will retry', () => runBillingCycle(ctx));
  // Proof of reserves: the treasury against the ledger, for the metrics (an alert below 1) and the log; a gap found
  // (twice in a row) pauses withdrawals and payouts until an operator resumes them (domain/reserves/).
  const reserveEveryMs = durationMs(config.billing.reserve_check_interval);
  if (ctx.chain && reserveEveryMs > 0) {
    const check = () => checkReserves(ctx);
    check().catch((err) => ctx.logger.warn({ err: (err as Error).message }, 'the reserve check failed; will retry'));
    every(reserveEveryMs, 'the reserve check failed; will retry', check);
  }
  // Capped sessions end when the time their cap paid for is over, not at the next cycle.
  every(durationMs(config.billing.spend_cap_check_interval), 'the cap sweep failed; will retry', () =>
    endSessionsAtCap(ctx),
  );
  // A workload that never ran ends its session unbilled once `workload_start_timeout` is over.
  every(
    durationMs(config.billing.spend_cap_check_interval) || 5000,
    'the workload start sweep failed; will retry',
    () => endWorkloadsNeverStarted(ctx),
  );
  // The audit trail keeps its events for `audit.retention` (its one deletion, by the purge role of
  // `audit.purge_url`), and its head goes to the log (@gpu/common's db/audit-purge.ts).
  const audit = await auditRound({
    db: ctx.db,
    purgeUrl: config.audit.purge_url,
    retentionMs: durationMs(config.audit.retention),
    logger: ctx.logger,
  });
  every(60 * 60_000, 'the audit trail round failed; will retry', () => audit.run());
  // Session events are kept for their parties to read for `event_retention`.
  const retentionMs = durationMs(config.billing.event_retention);
  if (retentionMs > 0) {
    every(reconcileEvery, 'purging old session events failed; will retry', () =>
      purgeOldSessionEvents(ctx, retentionMs),
    );
  }

  // Usage records are kept for `usage_retention` after their session ended.
  const usageRetentionMs = durationMs(config.billing.usage_retention);
  if (usageRetentionMs > 0) {
    every(60 * 60_000, 'purging old usage records failed; will retry', () =>
      purgeOldUsageRecords(ctx, usageRetentionMs),
    );
  }

  // Browsers' port links and cookies, once expired (domain/reach/port-grants.ts).
  every(10 * 60_000, 'purging expired port grants failed; will retry', () => purgeExpiredGrants(ctx));

  const consumer: UsageConsumer | null =
    publisher instanceof NatsPublisher
      ? await startUsageConsumer({
          connection: publisher.connection,
          ctx,
          verifier,
          prefix: config.messaging.subjects.usage,
          subjectIdentity: config.messaging.subject_identity,
          reportsPrefix: config.messaging.subjects.usage_reports,
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
  if (ctx.providers) {
    every(providerCheckEveryMs(config, statuses !== null), 'provider check failed; will retry', () =>
      checkRunningProviders(ctx),
    );
  }

  // Lapsed reservations dropped and their machines' GPUs stated free (domain/leases/held.ts): at the next expiry, and
  // every second for those another instance made.
  if (ctx.providers) {
    let atExpiry: NodeJS.Timeout | undefined;
    every(RESERVATION_SWEEP_MS, 'expiring reservations failed; will retry', async () => {
      const next = await expireReservations(ctx);
      clearTimeout(atExpiry);
      if (next) {
        atExpiry = setTimeout(() => sweep.wake(), Math.max(0, next.getTime() - ctx.now().getTime()));
        atExpiry.unref();
      }
    });
    const sweep = rounds.at(-1)!;
    ctx.state.wakeReservations = () => sweep.wake();
  }

  // Jobs (domain/jobs/): ended attempts settled, then due jobs placed, every `jobs.place_interval`.
  // Also at once when woken (a job submitted, a session ended, a machine's status changed: ctx.state.wakeJobs; with
  // `capacity`, the jobs waiting out their retry too), and at the next queued job's queue timeout, which ends it then
  // however long the interval.
  if (ctx.providers) {
    let capacity = false;
    let atDeadline: NodeJS.Timeout | undefined;
    every(durationMs(config.jobs.place_interval), 'placing jobs failed; will retry', async () => {
      const appeared = capacity;
      capacity = false;
      // Each half on its own: a failure following never holds back placing.
      await followJobs(ctx, config.jobs).catch((err) =>
        ctx.logger.warn({ err: (err as Error).message }, 'following jobs failed; will retry'),
      );
      await placeJobs(ctx, config.jobs, { capacity: appeared });
      const deadline = await nextQueueDeadline(ctx);
      clearTimeout(atDeadline);
      if (deadline) {
        // Not sooner than QUEUE_DEADLINE_MIN_MS: a deadline passed that a round could not take yet is not spun on.
        const wait = Math.max(QUEUE_DEADLINE_MIN_MS, deadline.getTime() - ctx.now().getTime());
        atDeadline = setTimeout(() => jobs.wake(), wait);
        atDeadline.unref();
      }
    });
    const jobs = rounds.at(-1)!;
    ctx.state.wakeJobs = (why) => {
      if (why === 'capacity') capacity = true;
      jobs.wake();
    };
  }

  return {
    healthChecks: {
      ...(consumer ? { usage_consumer: () => consumer.check() } : {}),
      ...(storageUsage ? { storage_usage_consumer: () => storageUsage.check() } : {}),
      ...(statuses ? { provider_status_consumer: () => statuses.check() } : {}),
    },
    metrics: [
      ...(consumer?.metrics ?? []),
      ...(storageUsage?.metrics ?? []),
      ...opsMetrics(ctx),
      // The consumers' lag, billing_consumer_pending{consumer}, and whether NATS is connected (NATS only).
      ...(publisher instanceof NatsPublisher
        ? [
            consumerPendingGauge(
              'billing',
              [consumer, storageUsage, statuses].filter((c) => c !== null),
              ctx.logger,
            ),
            natsConnectedGauge(publisher),
          ]
        : []),
    ],
    async stop() {
      for (const round of rounds) round.stop();
      await consumer?.stop();
      await storageUsage?.stop();
      await statuses?.stop();
      await Promise.all(rounds.map((r) => r.running));
      await settleAutoPayouts(ctx);
      await relay?.stop();
      await audit.close();
    },
  };
}

/** Work run every `ms` (never when 0), one run at a time: a tick while a run goes on is skipped. */
class Round {
  private readonly timer: NodeJS.Timeout | undefined;
  /** The run going on, if any. */
  running: Promise<unknown> | undefined;
  /** Woken while running: run again once this run is over. */
  private again = false;
  private stopped = false;

  constructor(
    private readonly work: () => Promise<unknown>,
    private readonly failed: (err: unknown) => void,
    ms: number,
  ) {
    this.timer = ms > 0 ? setInterval(() => this.run(), ms) : undefined;
    this.timer?.unref();
  }

  private run(): void {
    if (this.running || this.stopped) return;
    this.running = this.work()
      .catch(this.failed)
      .finally(() => {
        this.running = undefined;
        if (this.again) {
          this.again = false;
          this.run();
        }
      });
  }

  /** Runs now, or again right after the run going on (a round with no interval is never woken). */
  wake(): void {
    if (this.timer === undefined) return;
    if (this.running) this.again = true;
    else this.run();
  }

  stop(): void {
    this.stopped = true;
    clearInterval(this.timer);
  }
}
