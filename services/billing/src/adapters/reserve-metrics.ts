/**
 * The proof of reserves as metrics, from the last check for the record (domain/reserves/: the background check's, an
 * admin's, a payout's that found a gap): the treasury's balance, what it must hold, their ratio (the alert fires below
 * 1), the gap, the surplus (deposits waiting: tokens sent to the treasury that no wallet has claimed yet, deposits
 * being claimed by signature), and when the last check ran; and whether withdrawals and payouts are paused (read from
 * the database when Prometheus scrapes, bounded: common's boundedRead).
 *
 * Each of the report's gauges is registered when the first check sets it, not before: a gauge never set would read 0,
 * as an empty treasury (and the SOL balance, read apart, only once a read of it succeeded). But where this instance
 * checks the reserves in the background, when they were last checked is there from the start, reading when it started:
 * a chain unreachable from the first check on raises the stale-check alert as one that became unreachable later does.
 */
import { boundedRead, countReadFailures, metricReadFailed } from '@gpu/common';
import { Gauge, type Metric, type Registry } from 'prom-client';
import type { BillingContext } from '../domain/context.ts';
import { payoutPause, type ReserveReport } from '../domain/reserves/index.ts';

/**
 * Registers the metrics on `registry` and has the context's checks recorded in them; `checkedInBackground`: this
 * instance checks the reserves on its own (background.ts), so their last check's time starts at now.
 */
export function watchReserves(ctx: BillingContext, registry: Registry, opts: { checkedInBackground: boolean }): void {
  const gauge = (name: string, help: string) => new Gauge({ name, help, registers: [] });
  const balance = gauge('billing_treasury_balance_tokens', "the treasury's balance of the platform token on chain");
  const sol = gauge(
    'billing_treasury_sol',
    "the treasury's SOL on chain: it pays every transfer's fee (withdrawals and payouts fail on chain without it)",
  );
  const owed = gauge(
    'billing_ledger_owed_tokens',
    'what the ledger owes: wallets (available, locked, pending out) and fees',
  );
  const required = gauge(
    'billing_reserve_required_tokens',
    'what the treasury must hold at least: owed less what has left of what is in flight',
  );
  const ratio = gauge('billing_reserve_ratio', "the treasury's balance over what it must hold (below 1: not covered)");
  const gap = gauge('billing_reserve_gap_tokens', 'what the treasury lacks to cover the ledger (0 when covered)');
  const checked = gauge(
    'billing_reserve_check_timestamp_seconds',
    'when the reserves were last checked (Unix time); before the first check, when this instance started checking them',
  );
  const unclaimed = gauge(
    'billing_deposits_unclaimed_tokens',
    'deposits waiting: what the treasury holds beyond what it must (tokens sent to it that no wallet has claimed yet)',
  );
  const shown = new Set<Metric>();
  const show = (metric: Gauge, value: number) => {
    if (!shown.has(metric)) {
      registry.registerMetric(metric);
      shown.add(metric);
    }
    metric.set(value);
  };
  if (opts.checkedInBackground) show(checked, Date.now() / 1000);
  countReadFailures('billing_payouts_paused');
  registry.registerMetric(
    new Gauge({
      name: 'billing_payouts_paused',
      help: 'whether withdrawals and payouts are paused (1), by a reserve check that found a gap or by an operator',
      registers: [],
      async collect() {
        try {
          this.set((await boundedRead(ctx.db, (trx) => payoutPause(ctx, trx))) ? 1 : 0);
        } catch (err) {
          metricReadFailed(ctx.logger, 'billing_payouts_paused', err);
        }
      },
    }),
  );
  const record = (r: ReserveReport) => {
    show(balance, Number(r.treasury_balance));
    if (r.treasury_sol !== null) show(sol, Number(r.treasury_sol));
    show(owed, Number(r.owed.total));
    show(required, Number(r.required));
    // Nothing required: covered, whatever the balance.
    show(ratio, r.ratio === null ? 1 : Number(r.ratio));
    show(gap, Number(r.gap));
    show(unclaimed, Math.max(0, Number(r.treasury_balance) - Number(r.required)));
    show(checked, Date.parse(r.checked_at) / 1000);
  };
  ctx.state.reserveWatch = record;
  // A check made before the app was built (the service's first, at start-up).
  if (ctx.state.reserveReport) record(ctx.state.reserveReport);
}
