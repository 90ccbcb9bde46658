/**
 * Proof of reserves: does the treasury's token balance on chain cover what the ledger owes? Owed is every wallet's
 * `available`, `locked` and `pending_out` and the platform's fees not yet swept (`platform_fees`): the tokens the
 * platform holds for others and for itself.
 *
 * - Withdrawals and payouts **in flight** (`pending_out`: debited, sent or about to be) have left the treasury once
 *   their transfer landed at the commitment balances are read at; until then (not sent yet, sent but not landed,
 *   failed on chain and about to be reversed) the treasury still holds them and must. A landed one's token account
 *   fee (the part withheld to pay for the destination's new token account) never leaves: it is the platform's once
 *   settled, and the treasury holds it meanwhile. So the treasury must hold `available + locked + platform_fees` plus
 *   the in-flight amounts that have not left and the fees of those that have (`required`); `ratio` is the balance
 *   over that, and below 1 the check fails and names the `gap`.
 * - Read in this order: the ledger and the payouts in flight in one statement, then the in-flight signatures' states,
 *   then the treasury's balance. Whatever moves in between makes the check see less than there is, never more: a
 *   payout debited after the ledger read is still owed in it and may have left the treasury by the balance read; one
 *   that lands after its state was read is counted as still to leave and is gone from the balance. So a check errs
 *   towards a gap, never towards hiding one. Tokens in the treasury that the ledger does not owe (minted to it,
 *   deposits not claimed yet) are a surplus: `ratio` above 1.
 * - One read that finds a gap is read again before anyone is told: a gap that is real is there the second time.
 *
 * Checked every `billing.reserve_check_interval` (background.ts), at an admin's demand (`GET /api/v1/billing/reserves`)
 * and before every withdrawal and payout (`assertReservesCover`): a payout the treasury cannot cover, with what the
 * ledger owes everyone else, is refused before anything is debited (503 RESERVES_INSUFFICIENT). A gap found twice in a
 * row pauses withdrawals and payouts until an operator resumes them (pause.ts).
 */
import type { Principal } from '@gpu/common';
import { ledgerOwed } from '../../db/reserve-repository.ts';
import { billingErrors } from '../../errors.ts';
import { chainError, landedAt } from '../chain/index.ts';
import type { BillingContext } from '../context.ts';
import { Dec, formatAmount } from '../ledger/index.ts';
import { endPause, type PayoutPause, pauseForShortfall, payoutPause, type Shortfall } from './pause.ts';
import type { ReserveReport } from './report.ts';

/** At most this many in-flight signatures are asked about in one check; any beyond count as not left. */
const MAX_SIGNATURES_ASKED = 1024;

export type { ReserveReport };

/** A check's answer: the report and whether withdrawals and payouts are paused (and why) after it. */
export interface ReserveCheck {
  report: ReserveReport;
  pause: PayoutPause | null;
}

/** Reads the ledger and the chain once and compares them (see the order above); SOLANA_NOT_CONFIGURED without a chain. */
export async function readReserves(ctx: BillingContext): Promise<ReserveReport> {
  const chain = ctx.chain;
  if (!chain) throw billingErrors.chainNotConfigured();
  const owed = await ledgerOwed(ctx.db);
  const asked = owed.inFlight.filter((p) => p.signature !== null).slice(0, MAX_SIGNATURES_ASKED);
  let treasuryBalance: Dec;
  let treasurySol: string | null;
  let left: Set<string>;
  try {
    const states = asked.length > 0 ? await chain.signatureStates(asked.map((p) => p.signature!)) : [];
    left = new Set(asked.filter((_, i) => landedAt(ctx.commitment, states[i]!)).map((p) => p.signature!));
    [treasuryBalance, treasurySol] = await Promise.all([
      chain.tokenBalance(chain.treasuryAddress()).then((b) => new Dec(b)),
      // What pays the fees is reported, not checked: a failed read of it stops no payout.
      chain.treasurySol().catch(() => null),
    ]);
  } catch (err) {
    throw chainError(err);
  }
  const of = (kind: string) => new Dec(owed.balances[kind] ?? '0');
  const parts = {
    available: of('available'),
    locked: of('locked'),
    pending_out: of('pending_out'),
    platform_fees: of('platform_fees'),
  };
  const unsent = owed.inFlight.reduce(
    (sum, p) => sum.plus(p.signature !== null && left.has(p.signature) ? p.fee : p.amount),
    new Dec(0),
  );
  const total = parts.available.plus(parts.locked).plus(parts.pending_out).plus(parts.platform_fees);
  const required = total.minus(parts.pending_out).plus(unsent);
  const gap = Dec.max(required.minus(treasuryBalance), 0);
  const fmt = (d: Dec) => formatAmount(d, ctx.scale);
  return {
    checked_at: ctx.now().toISOString(),
    treasury: chain.treasuryAddress(),
    treasury_balance: fmt(treasuryBalance),
    treasury_sol: treasurySol,
    owed: {
      available: fmt(parts.available),
      locked: fmt(parts.locked),
      pending_out: fmt(parts.pending_out),
      platform_fees: fmt(parts.platform_fees),
      total: fmt(total),
    },
    in_flight: fmt(parts.pending_out),
    in_flight_unsent: fmt(unsent),
    required: fmt(required),
    ratio: required.gt(0) ? treasuryBalance.div(required).toDecimalPlaces(6, Dec.ROUND_DOWN).toFixed(6) : null,
    covered: gap.isZero(),
    gap: fmt(gap),
  };
}

/**
 * A proof of reserves for the record (the background check, an admin's): reads, tells the metrics, and on a gap found
 * twice in a row logs an error and pauses withdrawals and payouts. The report and the pause as they stand afterwards.
 */
export async function checkReserves(ctx: BillingContext): Promise<ReserveCheck> {
  let report = await readReserves(ctx);
  if (!report.covered) {
    // A deposit claimed or a payout landing between the reads can show a gap that is not there: it is gone the next
    // time. A real one stays.
    report = await readReserves(ctx);
  }
  // The metrics hear of the gap before the pause is written: whoever sees the pause sees the figures that caused it.
  ctx.state.reserveReport = report;
  ctx.state.reserveWatch?.(report);
  if (!report.covered) {
    ctx.logger.error(
      { reserves: report },
      `the treasury does not cover what the ledger owes: ${report.gap} short of ${report.required}`,
    );
    await pauseForShortfall(ctx, shortfallOf(report));
  }
  return { report, pause: await payoutPause(ctx) };
}

/**
 * Before a withdrawal or payout moves anything: the treasury must cover it together with everything else the ledger
 * owes (the payout's own amount is part of what is owed: its wallet's available balance). Refused with 503
 * RESERVES_INSUFFICIENT otherwise, on a gap read twice. It pauses nothing (a retry gets the same answer while the gap
 * lasts): the next check for the record does, within `billing.reserve_check_interval`.
 */
export async function assertReservesCover(ctx: BillingContext): Promise<void> {
  if ((await readReserves(ctx)).covered) return;
  const again = await readReserves(ctx);
  if (again.covered) return;
  ctx.logger.error({ reserves: again }, `a payout refused: the treasury is ${again.gap} short of what the ledger owes`);
  throw billingErrors.reservesInsufficient();
}

const shortfallOf = (r: ReserveReport): Shortfall => ({
  gap: r.gap,
  required: r.required,
  treasury_balance: r.treasury_balance,
  ratio: r.ratio,
  checked_at: r.checked_at,
});

/**
 * An operator resumes withdrawals and payouts, once the treasury covers the ledger again (409 RESERVES_NOT_COVERED
 * with the check's figures otherwise: each payout would be refused anyway, and the next check would pause them
 * again, and while none is in force, too); the pause that ended, or null when none was in force.
 */
export async function resumePayouts(
  ctx: BillingContext,
  actor: Principal,
  reason: string,
): Promise<PayoutPause | null> {
  const report = await readReserves(ctx);
  if (!report.covered) throw billingErrors.reservesNotCovered(shortfallOf(report));
  return endPause(ctx, actor, reason);
}
