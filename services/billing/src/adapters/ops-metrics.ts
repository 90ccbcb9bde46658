/**
 * What an operator watches in billing, read from the database when Prometheus scrapes (one cheap count each): sessions
 * running, the GPU-hours this instance billed (counted in memory as sessions are billed; Prometheus sums instances), how
 * late the latest usage report of a running session is, the outbox's backlog and its oldest event's age (events not
 * yet on NATS: common's outboxMetrics), withdrawals and payouts sent but not settled and the oldest one's age, and
 * wallets whose automatic payouts keep failing. Each read is bounded (common's databaseGauge: a locked table costs a
 * scrape its gauge, not a connection). Every instance reads the same database, so the alert rules
 * (deploy/prometheus/alerts.yml) take the `max` of these gauges over instances, never their sum.
 */

import { databaseGauge, outboxMetrics } from '@gpu/common';
import { type RawBuilder, sql } from 'kysely';
import { Counter, type Metric } from 'prom-client';
import type { BillingContext } from '../domain/context.ts';

export function opsMetrics(ctx: BillingContext): Metric[] {
  const fromDb = (name: string, help: string, query: RawBuilder<{ n: string | number | null }>) =>
    databaseGauge({ name, help, db: ctx.db, logger: ctx.logger, query });
  // A tally the context keeps in memory as it works (it only grows): the counter catches up to it at each scrape.
  const fromState = (name: string, help: string, read: () => number) => {
    let shown = 0;
    return new Counter({
      name,
      help,
      registers: [],
      collect() {
        const now = read();
        if (now > shown) this.inc(now - shown);
        shown = Math.max(shown, now);
      },
    });
  };
  return [
    fromState(
      'billing_gpu_hours_billed_total',
      'GPU-hours billed by this instance (each session: its billed minutes × its GPUs / 60) since it started',
      () => ctx.state.gpuMinutesBilled / 60,
    ),
    fromState(
      'billing_preemptions_total',
      'interruptible sessions whose GPUs a higher bid or an on-demand start of this instance took back',
      () => ctx.state.preemptions,
    ),
    fromDb(
      'billing_sessions_running',
      'rental sessions active or in their grace period',
      sql`SELECT count(*) AS n FROM rental_sessions WHERE status IN ('active', 'grace_period')`,
    ),
    fromDb(
      'billing_usage_lag_seconds',
      'seconds since the running session heard from the longest has had a usage report (since its start if none; 0: none running)',
      sql`SELECT coalesce(max(extract(epoch FROM now() - coalesce(last_usage_at, started_at))), 0) AS n
          FROM rental_sessions WHERE status IN ('active', 'grace_period')`,
    ),
    ...outboxMetrics('billing', ctx.db, ctx.logger),
    fromDb(
      'billing_payouts_pending',
      'withdrawals and payouts sent or being sent, not yet settled',
      sql`SELECT count(*) AS n FROM transactions WHERE type IN ('withdrawal', 'payout') AND status = 'pending'`,
    ),
    // The alert on stuck payouts reads the oldest one's age: a steady trickle of quick payouts is no backlog.
    fromDb(
      'billing_payouts_pending_oldest_seconds',
      'age of the oldest withdrawal or payout sent or being sent, not yet settled (0: none)',
      sql`SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0) AS n FROM transactions
          WHERE type IN ('withdrawal', 'payout') AND status = 'pending'`,
    ),
    fromDb(
      'billing_auto_payouts_failing',
      'wallets whose last automatic payout failed',
      sql`SELECT count(*) AS n FROM wallets WHERE auto_payout_failures > 0`,
    ),
  ];
}
