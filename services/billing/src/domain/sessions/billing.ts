/**
 * Billing a running session as time passes (usage updates and the background
 * biller both call `billElapsed` under the session's row lock):
 *
 *  1. Full elapsed minutes are billed (partial minutes are billed at the end,
 *     or never when terminated): `total_cost` = hourly × minutes / 60, rounded
 *     once. Billing is by the service's clock, never the daemon's, and never
 *     goes backwards, so late, duplicate and out-of-order updates are harmless.
 *  2. A session with a spend cap costs at most the cap, and runs no longer than
 *     the cap pays for: once the time it paid for is over (`cap_ends_at`, the
 *     cap at the frozen rate) or its full minutes' cost reaches the cap, the
 *     cost is the cap exactly (the crossing minute billed up to it) and the
 *     caller ends the session (`completed`, reason `spend_cap`). The hold never
 *     holds more than the cap.
 *  3. The hold must stay ahead of the billed cost: when it covers less than
 *     `hold_top_up_below` (default 10 min) or `low_balance_warning` (default
 *     15 min) beyond it, it is topped up from the available balance to cover
 *     another `initial_period`, as far as funds go (and the cap allows).
 *  4. Low balance: when the top-up came up short (the wallet is empty) and the
 *     hold pays for less than `low_balance_warning` more, the renter is warned
 *     once (`session.low_balance`, `low_balance_at`); funds that arrive clear
 *     the warning, so a later shortfall warns again.
 *  5. When hold and wallet together can't cover the next `billing_interval`,
 *     the session enters `grace_period` until `grace_until` (now +
 *     `grace_period`), with a `session.grace_period` event; funds arriving in
 *     time return it to `active`. Once `grace_until` has passed, the caller
 *     ends it as `terminated` (reason `insufficient_funds`).
 *
 * `planBillings` and `writeBillings` do this for many sessions in one pass: the
 * holds are read in one query and the sessions written in one statement; only a
 * hold that needs topping up or a status change costs statements of its own.
 * Usage batches write the sessions together with their usage records.
 */
import type { Transaction } from 'kysely';
import type { BillingDB } from '../../db/schema.ts';
import { writeBilledSessions } from '../../db/session-repository.ts';
import type { Billable, UsageRow } from '../../db/usage-repository.ts';
import type { BillingContext, RatePeriods } from '../context.ts';
import { Dec, getHolds, type Hold, topUpHold } from '../ledger/index.ts';
import { billableMinutes, costOfHours, costOfSessionMinutes } from '../pricing/index.ts';
import { billedElapsedMs, capTimeOver, graceDeadline, graceOver } from './clock.ts';
import type { EndKind, SessionRow } from './session.ts';

/** How a session that billing finds over must end: its grace period ran out, or its cost reached its cap. */
const GRACE_OVER: EndKind = { status: 'terminated', reason: 'insufficient_funds' };
const CAP_REACHED: EndKind = { status: 'completed', reason: 'spend_cap' };

export interface BillOutcome<S extends Billable = SessionRow> {
  /** The session as billing wrote it (the item's columns, those billing wrote as stored). */
  session: S;
  /** Cost billed by this call (0 when no new full minute passed). */
  billed: Dec;
  /** How the caller must end the session now (`finishSession`), or null while it runs on. */
  end: EndKind | null;
  /** The events billing's change raises (`recordBillingEvents` records them with the whole session). */
  events: SessionEvent[];
  correlationId?: string;
}

/** One session to bill (its row locked by the caller) and, optionally, the newest usage report to record on it. */
export interface BillItem<S extends Billable = SessionRow> {
  session: S;
  /** What the session's hold still holds, when the caller has read it already (else it is read here). */
  held?: Dec;
  usage?: { actualPowerW: string; lastUsageAt: Date };
  correlationId?: string;
  /** Where the caller's row lock found the session's row (its `ctid`), when it read it: written there. */
  at?: string;
}

type SessionEvent = 'session.grace_period' | 'session.resumed' | 'session.low_balance';

/** What billing changes on one session row. */
interface SessionChange {
  id: string;
  minutes: number;
  cost: Dec;
  billed: Dec;
  status: SessionRow['status'];
  graceUntil: Date | null;
  lowBalanceAt: Date | null;
  usage?: BillItem['usage'];
  at?: string;
  events: SessionEvent[];
  capReached: boolean;
  correlationId?: string;
}

/**
 * Bills full elapsed minutes, keeps the hold ahead, and moves the session in and out of grace;
 * `usage` (the newest report's power and time) is written in the same statement.
 */
export async function billElapsed(
  ctx: BillingContext,
  trx: Transaction<BillingDB>,
  session: SessionRow,
  correlationId?: string,
  usage?: BillItem['usage'],
): Promise<BillOutcome> {
  const [outcome] = await writeBillings(ctx, trx, await planBillings(ctx, trx, [{ session, usage, correlationId }]));
  await recordBillingEvents(ctx, trx, outcome!, outcome!.session);
  return outcome!;
}

/** What billing will write on one session, worked out (and its hold topped up) before anything else is written. */
export interface BillPlan<S extends Billable = SessionRow> {
  item: BillItem<S>;
  /** The billed minutes and cost the session row will hold. */
  minutes: number;
  /** Cost billed by this pass (0 when no new full minute passed). */
  billed: Dec;
  /** How the caller must end the session once written, or null while it runs on. */
  end: EndKind | null;
  change: SessionChange;
  now: Date;
}

/**
 * Works out the billing of several distinct sessions (holds read in one query when the caller has not read them;
 * a hold running low is topped up here, the only write), so that the caller can write what follows from it (usage
 * records) in the same statement as the sessions (`writeBillings`).
 */
export async function planBillings<S extends Billable>(
  ctx: BillingContext,
  trx: Transaction<BillingDB>,
  items: BillItem<S>[],
): Promise<BillPlan<S>[]> {
  if (items.length === 0) return [];
  const now = ctx.now();
  const unread = items.filter((i) => i.held === undefined).map((i) => i.session.hold_id);
  const holds = unread.length > 0 ? await getHolds(trx, unread) : new Map<string, Hold>();
  // Planned in wallet order (then session order): a hold's top-up locks its renter's wallet accounts, and every batch
  // that tops up holds of the same wallets then locks them in one order, whatever order its reports came in. In
  // arrival order, two batches reaching two wallets in opposite orders deadlocked (PostgreSQL failed one after a
  // second, and its updates were retried one by one).
  const order = items.map((_, i) => i).sort((a, b) => compareForLocks(items[a]!.session, items[b]!.session));
  const plans: BillPlan<S>[] = new Array(items.length);
  for (const i of order) {
    const item = items[i]!;
    const held = item.held ?? new Dec(holds.get(item.session.hold_id)?.remaining ?? 0);
    const change = await planBilling(ctx, trx, item, held, now);
    const end = change.capReached ? CAP_REACHED : graceOver(change, now) ? GRACE_OVER : null;
    plans[i] = { item, minutes: change.minutes, billed: change.billed, end, change, now };
  }
  return plans;
}

/**
 * The order in which a transaction that locks several sessions' wallet accounts takes them: by wallet, then session.
 * Every batch that tops up holds or ends sessions of the same wallets then locks them in one order.
 */
export const compareForLocks = (a: Pick<Billable, 'wallet_id' | 'id'>, b: Pick<Billable, 'wallet_id' | 'id'>) =>
  a.wallet_id < b.wallet_id ? -1 : a.wallet_id > b.wallet_id ? 1 : a.id < b.id ? -1 : a.id > b.id ? 1 : 0;

/**
 * Writes planned billings in one statement (with `usageRecords`, the usage records of the caller's batch, written in
 * the same one); outcomes in the plans' order, each with the events the caller records (`recordBillingEvents`).
 */
export async function writeBillings<S extends Billable>(
  ctx: BillingContext,
  trx: Transaction<BillingDB>,
  plans: BillPlan<S>[],
  usageRecords: UsageRow[] = [],
): Promise<BillOutcome<S>[]> {
  if (plans.length === 0) return [];
  const updated = await writeBilledSessions(
    trx,
    plans.map((p) => p.change),
    plans[0]!.now,
    ctx.scale,
    usageRecords,
  );
  const outcomes: BillOutcome<S>[] = [];
  for (const { item, change, billed, end } of plans) {
    const written = updated.get(change.id);
    if (!written) throw new Error(`session ${change.id} vanished while billed`);
    const session: S = { ...item.session, ...written };
    countGpuMinutes(ctx, item.session, session.billed_minutes);
    outcomes.push({ session, billed, end, events: change.events, correlationId: change.correlationId });
  }
  return outcomes;
}

/** Records the events of a billing's outcome, with the session's whole row as billing left it. */
export async function recordBillingEvents(
  ctx: BillingContext,
  trx: Transaction<BillingDB>,
  outcome: Pick<BillOutcome<Billable>, 'events' | 'correlationId'>,
  session: SessionRow,
): Promise<void> {
  for (const kind of outcome.events) await ctx.events.record(trx, { kind, session }, outcome.correlationId);
}

/** Counts a session's newly billed minutes for `billing_gpu_hours_billed_total` (never backwards, never twice). */
export function countGpuMinutes(
  ctx: BillingContext,
  before: Pick<SessionRow, 'id' | 'billed_minutes' | 'gpu_count'>,
  minutes: number,
) {
  const counted = Math.max(before.billed_minutes, ctx.state.minutesCounted.get(before.id) ?? 0);
  if (minutes <= counted) return;
  ctx.state.gpuMinutesBilled += (minutes - counted) * before.gpu_count;
  ctx.state.minutesCounted.set(before.id, minutes);
}

/** The rate's cost over each settings period, worked out once per rate and settings (the context's cache). */
function ratePeriods(ctx: BillingContext, rate: string): RatePeriods {
  const { scale, sessions: s } = ctx;
  const key = `${rate}|${scale}|${s.holdTopUpBelowMs}|${s.lowBalanceWarningMs}|${s.billingIntervalMs}|${s.initialPeriodMs}`;
  let periods = ctx.state.ratePeriods.get(key);
  if (!periods) {
    const hourly = new Dec(rate);
    const periodCost = (ms: number) => costOfHours(hourly, new Dec(ms).div(3_600_000), scale);
    periods = {
      hourly,
      topUpBelow: periodCost(s.holdTopUpBelowMs),
      lowBalance: periodCost(s.lowBalanceWarningMs),
      billingInterval: periodCost(s.billingIntervalMs),
      initialPeriod: periodCost(s.initialPeriodMs),
    };
    ctx.state.ratePeriods.set(key, periods);
  }
  return periods;
}

/** Works out one session's billing; tops its hold up when it runs low (the only step that writes). */
async function planBilling(
  ctx: BillingContext,
  trx: Transaction<BillingDB>,
  item: BillItem<Billable>,
  heldBefore: Dec,
  now: Date,
): Promise<SessionChange> {
  const { session } = item;
  const periods = ratePeriods(ctx, session.total_hourly_rate);
  const elapsed = billedElapsedMs(session, now);
  const full = Math.max(billableMinutes(elapsed, false), session.billed_minutes);
  const cap = session.spend_cap === null ? null : new Dec(session.spend_cap);
  const uncapped = costOfSessionMinutes(session, full, ctx.scale);
  const capReached = cap !== null && (capTimeOver(session, now) || uncapped.gte(cap));
  const cost = capReached ? cap : uncapped;
  // At the cap, the minute it was crossed in is billed too (up to the cap): the minutes the session ran.
  const minutes = capReached ? Math.max(full, billableMinutes(elapsed, true)) : full;
  /** Never more than the cap: what is held, topped up to, or needed next. */
  const upToCap = (d: Dec) => (cap === null ? d : Dec.min(d, cap));

  const nextPeriod = upToCap(cost.plus(periods.billingInterval));
  const lowWater = upToCap(cost.plus(Dec.max(periods.topUpBelow, periods.lowBalance)));
  let held = heldBefore;
  let short = false;
  // Only a hold running low touches the renter's accounts (locks them, tops up from available). At the cap the
  // hold is topped up to the cap, no further.
  if (held.lt(lowWater) || held.lt(nextPeriod)) {
    const topUp = await topUpHold(trx, session, upToCap(cost.plus(periods.initialPeriod)), {
      now,
      accountIds: ctx.state.accountIds,
    });
    held = topUp.held;
    short = topUp.short.gt(0);
  }
  // The cap ends the session once the hold pays all of it; a renter who cannot pay the last of it is in grace like
  // any other (no more is charged past the cap), and ends at the cap when funds come or unpaid when grace runs out.
  const capEnd = capReached && held.gte(cost);
  const covered = capEnd || held.gte(nextPeriod);

  const events: SessionEvent[] = [];
  // Low: the wallet could not refill the hold, and the hold pays for less than the warning period more.
  const low = !capEnd && periods.lowBalance.gt(0) && short && held.lt(upToCap(cost.plus(periods.lowBalance)));
  let lowBalanceAt = session.low_balance_at ? new Date(session.low_balance_at) : null;
  if (low && lowBalanceAt === null) {
    lowBalanceAt = now;
    events.push('session.low_balance');
  } else if (!low) {
    // Funds came (or the warning is off): a later shortfall warns again.
    lowBalanceAt = null;
  }
  let status = session.status;
  let graceUntil = session.grace_until ? new Date(session.grace_until) : null;
  if (capEnd) {
    // Ends now (completed at the cap): no move in or out of grace first.
  } else if (!covered && status === 'active') {
    status = 'grace_period';
    graceUntil = graceDeadline(ctx, now);
    events.push('session.grace_period');
  } else if (covered && status === 'grace_period') {
    status = 'active';
    graceUntil = null;
    events.push('session.resumed');
  }
  return {
    id: session.id,
    minutes,
    cost,
    billed: cost.minus(session.total_cost),
    status,
    graceUntil,
    lowBalanceAt,
    usage: item.usage,
    at: item.at,
    events,
    capReached: capEnd,
    correlationId: item.correlationId,
  };
}
