/**
 * The proof of reserves as metrics, from the last check (domain/wallets/reserves.ts): the treasury's balance, what it
 * must hold, their ratio (the alert fires below 1), the gap, the surplus (deposits waiting: tokens sent to the treasury
 * that no wallet has claimed yet, deposits being claimed by signature), and when the last check succeeded.
 */
import { Gauge, type Metric } from 'prom-client';
import type { ReserveReport } from '../domain/wallets/index.ts';

export interface ReserveMetrics {
  metrics: Metric[];
  record(report: ReserveReport): void;
}

export function reserveMetrics(): ReserveMetrics {
  const gauge = (name: string, help: string) => new Gauge({ name, help, registers: [] });
  const balance = gauge('billing_treasury_balance_tokens', "the treasury's balance of the platform token on chain");
  const owed = gauge(
    'billing_ledger_owed_tokens',
    'what the ledger owes: wallets (available, locked, pending out) and fees',
  );
  const required = gauge(
    'billing_reserve_required_tokens',
    'what the treasury must hold at least: owed less in flight',
  );
  const ratio = gauge('billing_reserve_ratio', "the treasury's balance over what it must hold (below 1: not covered)");
  const gap = gauge('billing_reserve_gap_tokens', 'what the treasury lacks to cover the ledger (0 when covered)');
  const checked = gauge('billing_reserve_check_timestamp_seconds', 'when the reserves were last checked (Unix time)');
  const unclaimed = gauge(
    'billing_deposits_unclaimed_tokens',
    'deposits waiting: what the treasury holds beyond what it must (tokens sent to it that no wallet has claimed yet)',
  );
  return {
    metrics: [balance, owed, required, ratio, gap, checked, unclaimed],
    record(report) {
      balance.set(Number(report.treasury_balance));
      owed.set(Number(report.owed.total));
      required.set(Number(report.required));
      // Nothing required: covered, whatever the balance.
      ratio.set(report.ratio === null ? 1 : Number(report.ratio));
      gap.set(Number(report.gap));
      unclaimed.set(Math.max(0, Number(report.treasury_balance) - Number(report.required)));
      checked.set(Date.parse(report.checked_at) / 1000);
    },
  };
}
