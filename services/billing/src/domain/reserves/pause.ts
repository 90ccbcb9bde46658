/**
 * Withdrawals and payouts paused: a reserve check that found the treasury short of what the ledger owes (twice in a
 * row: reserves.ts) pauses them, and so may an operator; only an operator resumes them, and only once the treasury
 * covers the ledger again (reserves.ts). While paused every withdrawal and payout, asked for or automatic, is refused
 * with 503 PAYOUTS_PAUSED before anything is debited: the debit's own transaction reads the pause with a share lock
 * (`assertPayoutsOpen`), so none is debited after a pause committed. Payouts already debited are settled as always
 * (reconciliation). Pauses and resumptions are in the audit trail: the reserve check's here, an operator's by the
 * audit hook of the route they used.
 */
import { appendAudit, type Principal } from '@gpu/common';
import type { Kysely, Transaction } from 'kysely';
import {
  clearPayoutPause,
  lockPayoutPauseShared,
  type PayoutPauseRow,
  readPayoutPause,
  setPayoutPause,
} from '../../db/reserve-repository.ts';
import type { BillingDB } from '../../db/schema.ts';
import { billingErrors } from '../../errors.ts';
import type { BillingContext } from '../context.ts';

type PauseCause = 'reserve_shortfall' | 'operator';

export interface PayoutPause {
  since: Date;
  /** `reserve_shortfall`: a reserve check found a gap; `operator`: an operator paused them. */
  cause: PauseCause;
  /** Why, in words: the operator's, or what the check found. */
  reason: string | null;
  /** The operator's ID (null for the reserve check). */
  by: string | null;
  /** The check's figures: gap, required, treasury balance, ratio. */
  details: Record<string, unknown>;
}

function pauseOf(row: PayoutPauseRow): PayoutPause | null {
  if (!row.paused_at || !row.cause) return null;
  return { since: row.paused_at, cause: row.cause, reason: row.reason, by: row.paused_by, details: row.details };
}

/** The pause in force, or null (read with `db`: the context's, or a transaction's). */
export async function payoutPause(
  ctx: BillingContext,
  db: Kysely<BillingDB> | Transaction<BillingDB> = ctx.db,
): Promise<PayoutPause | null> {
  return pauseOf(await readPayoutPause(db));
}

/** PAYOUTS_PAUSED while paused; inside a payout's debit transaction, where it holds the pause's row shared. */
export async function assertPayoutsOpen(trx: Transaction<BillingDB>): Promise<void> {
  const pause = pauseOf(await lockPayoutPauseShared(trx));
  if (pause) throw billingErrors.payoutsPaused(pause.since, pause.cause);
}

/** Outside any transaction: a cheap refusal before anything is asked of the chain (the debit checks again). */
export async function assertPayoutsOpenNow(ctx: BillingContext): Promise<void> {
  const pause = await payoutPause(ctx);
  if (pause) throw billingErrors.payoutsPaused(pause.since, pause.cause);
}

/** What a reserve check found short: its figures, as the pause and the audit trail keep them. */
export interface Shortfall {
  gap: string;
  required: string;
  treasury_balance: string;
  ratio: string | null;
  checked_at: string;
}

/** The reserve check's pause (nothing when already paused), logged and in the audit trail. */
export async function pauseForShortfall(ctx: BillingContext, shortfall: Shortfall): Promise<void> {
  const { paused } = await setPayoutPause(ctx.db, {
    at: ctx.now(),
    cause: 'reserve_shortfall',
    reason: `the treasury holds ${shortfall.treasury_balance} of the ${shortfall.required} it must: ${shortfall.gap} short`,
    by: null,
    details: shortfall,
  });
  if (!paused) return;
  ctx.logger.error({ shortfall }, 'withdrawals and payouts paused: the treasury does not cover the ledger');
  await appendAudit(ctx.db, {
    action: 'payouts_paused',
    outcome: 'succeeded',
    target: 'payouts',
    details: { cause: 'reserve_shortfall', ...shortfall },
  }).catch((err: unknown) => ctx.logger.error({ err }, 'appending to the audit trail failed'));
}

/** An operator pauses withdrawals and payouts (their route's audit hook records it); the pause in force afterwards. */
export async function pausePayouts(ctx: BillingContext, actor: Principal, reason: string): Promise<PayoutPause> {
  const { row, paused } = await setPayoutPause(ctx.db, {
    at: ctx.now(),
    cause: 'operator',
    reason,
    by: actor.subject,
    details: {},
  });
  if (paused) ctx.logger.warn({ by: actor.subject, reason }, 'withdrawals and payouts paused by an operator');
  return pauseOf(row)!;
}

/** Ends the pause (its route's audit hook records who and why); the pause that ended, or null when none was. */
export async function endPause(ctx: BillingContext, actor: Principal, reason: string): Promise<PayoutPause | null> {
  const before = await ctx.db.transaction().execute((trx) => clearPayoutPause(trx));
  if (before) ctx.logger.warn({ by: actor.subject, reason, paused_since: before.paused_at }, 'payouts resumed');
  return before ? pauseOf(before) : null;
}
