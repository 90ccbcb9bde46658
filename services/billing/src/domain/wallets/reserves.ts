/**
 * Proof of reserves: does the treasury's token balance on chain cover what the ledger owes? Owed is every wallet's
 * `available`, `locked` and `pending_out` and the platform's fees not yet swept (`platform_fees`): the tokens the
 * platform holds for others and for itself.
 *
 * - Withdrawals and payouts **in flight** (`pending_out`: debited, sent or about to be) may have left the treasury
 *   already, before reconciliation settles them, so the treasury must hold at least `owed - in_flight` (`required`);
 *   `ratio` is the balance over that, and below 1 the check fails and names the `gap`.
 * - The chain is read first, then the ledger in one statement: a withdrawal that starts in between has moved to
 *   `pending_out` by then (no false alarm). A deposit whose tokens arrive after the chain was read and that is
 *   claimed before the ledger is (milliseconds) shows as a gap that the next check no longer has: the check errs
 *   towards an alarm, never towards hiding a shortfall.
 * - Tokens in the treasury that the ledger does not owe (minted to it, deposits never claimed) are a surplus:
 *   `ratio` above 1.
 *
 * Checked every `billing.reserve_check_interval` (background.ts), exported as metrics, and at an admin's demand
 * (`GET /api/v1/billing/reserves`).
 */
import { sql } from 'kysely';
import { billingErrors } from '../../errors.ts';
import type { BillingContext } from '../context.ts';
import { Dec, formatAmount } from '../ledger/index.ts';

export interface ReserveReport {
  checked_at: string;
  /** The treasury's address and its balance of the platform token, read from the chain. */
  treasury: string;
  treasury_balance: string;
  owed: { available: string; locked: string; pending_out: string; platform_fees: string; total: string };
  /** Withdrawals and payouts sent or being sent (`pending_out`): they may have left the treasury already. */
  in_flight: string;
  /** What the treasury must hold at least: owed less what is in flight. */
  required: string;
  /** treasury_balance / required (6 decimals); null when nothing is required. */
  ratio: string | null;
  covered: boolean;
  /** What the treasury lacks (0 when covered). */
  gap: string;
}

/** Reads the chain and the ledger and compares them; throws SOLANA_NOT_CONFIGURED without a chain. */
export async function checkReserves(ctx: BillingContext): Promise<ReserveReport> {
  const chain = ctx.chain;
  if (!chain) throw billingErrors.chainNotConfigured();
  const treasuryBalance = new Dec(await chain.tokenBalance(chain.treasuryAddress()));
  const { rows } = await sql<{ kind: string; balance: string }>`
    SELECT kind, coalesce(sum(balance), 0)::text AS balance FROM ledger_accounts
      WHERE kind IN ('available', 'locked', 'pending_out', 'platform_fees') GROUP BY kind`.execute(ctx.db);
  const of = (kind: string) => new Dec(rows.find((r) => r.kind === kind)?.balance ?? '0');
  const parts = {
    available: of('available'),
    locked: of('locked'),
    pending_out: of('pending_out'),
    platform_fees: of('platform_fees'),
  };
  const total = parts.available.plus(parts.locked).plus(parts.pending_out).plus(parts.platform_fees);
  const required = total.minus(parts.pending_out);
  const gap = Dec.max(required.minus(treasuryBalance), 0);
  const fmt = (d: Dec) => formatAmount(d, ctx.scale);
  const report: ReserveReport = {
    checked_at: ctx.now().toISOString(),
    treasury: chain.treasuryAddress(),
    treasury_balance: fmt(treasuryBalance),
    owed: {
      available: fmt(parts.available),
      locked: fmt(parts.locked),
      pending_out: fmt(parts.pending_out),
      platform_fees: fmt(parts.platform_fees),
      total: fmt(total),
    },
    in_flight: fmt(parts.pending_out),
    required: fmt(required),
    ratio: required.gt(0) ? treasuryBalance.div(required).toDecimalPlaces(6, Dec.ROUND_DOWN).toFixed(6) : null,
    covered: gap.isZero(),
    gap: fmt(gap),
  };
  if (!report.covered) {
    ctx.logger.error(
      { reserves: report },
      `the treasury does not cover what the ledger owes: ${report.gap} short of ${report.required}`,
    );
  }
  return report;
}
