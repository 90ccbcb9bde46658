/**
 * The proof of reserves as metrics, from the last check for the record (domain/reserves/: the background check's, an
 * admin's, a payout's that found a gap): the treasury's balance, what it must hold, their ratio (the alert fires below
 * 1), the gap, the surplus (deposits waiting: tokens sent to the treasury that no wallet has claimed yet, deposits
 * being claimed by signature), and when the last check ran; and whether withdrawals and payouts are paused (read from
 * the database when Prometheus scrapes).
 *
 * The report's gauges are registered with the first check, not before: a gauge never set would read 0, as an empty
 * treasury.
 */
import { Gauge, type Metric, type Registry } from 'prom-client';
import type { BillingContext } from '../domain/context.ts';
import { payoutPause, type ReserveReport } from '../domain/reserves/index.ts';

/** Registers the metrics on `registry` and has the context's checks recorded in them. */
export function watchReserves(ctx: BillingContext, registry: Registry): void {
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
  const checked = gauge('billing_reserve_check_timestamp_seconds', 'when the reserves were last checked (Unix time)');
  const unclaimed = gauge(
    'billing_deposits_unclaimed_tokens',
    'deposits waiting: what the treasury holds beyond what it must (tokens sent to it that no wallet has claimed yet)',
  );
  const report: Metric[] = [balance, sol, owed, required, ratio, gap, checked, unclaimed];
  registry.registerMetric(
    new Gauge({
      name: 'billing_payouts_paused',
      help: 'whether withdrawals and payouts are paused (1), by a reserve check that found a gap or by an operator',
      registers: [],
      async collect() {
        try {
          this.set((await payoutPause(ctx)) ? 1 : 0);
        } catch (err) {
          ctx.logger.warn({ err: (err as Error).message, metric: 'billing_payouts_paused' }, 'reading a metric failed');
        }
      },
    }),
  );
  let registered = false;
  const record = (r: ReserveReport) => {
    if (!registered) {
      for (const metric of report) registry.registerMetric(metric);
      registered = true;
    }
    balance.set(Number(r.treasury_balance));
    if (r.treasury_sol !== null) sol.set(Number(r.treasury_sol));
    owed.set(Number(r.owed.total));
    required.set(Number(r.required));
    // Nothing required: covered, whatever the balance.
    ratio.set(r.ratio === null ? 1 : Number(r.ratio));
    gap.set(Number(r.gap));
    unclaimed.set(Math.max(0, Number(r.treasury_balance) - Number(r.required)));
    checked.set(Date.parse(r.checked_at) / 1000);
  };
  ctx.state.reserveWatch = record;
  // A check made before the app was built (the service's first, at start-up).
  if (ctx.state.reserveReport) record(ctx.state.reserveReport);
}
