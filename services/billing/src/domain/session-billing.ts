/**
 * Billing a running session as time passes (usage updates and the background
 * biller both call `billElapsed` under the session's row lock):
 *
 *  1. Full elapsed minutes are billed (partial minutes are billed at the end,
 *     or never when terminated): `total_cost` = hourly × minutes / 60, rounded
 *     once. Billing is by the service's clock, never the daemon's, and never
 *     goes backwards, so late, duplicate and out-of-order updates are harmless.
 *  2. The hold must stay ahead of the billed cost: when it covers less than
 *     `hold_top_up_below` (default 10 min) beyond it, it is topped up from the
 *     available balance to cover another `initial_period`, as far as funds go.
 *  3. When hold and wallet together can't cover the next `billing_interval`,
 *     the session enters `grace_period` until `grace_until` (now +
 *     `grace_period`), with a `session.grace_period` event; funds arriving in
 *     time return it to `active`. Once `grace_until` has passed, the caller
 *     ends it as `terminated` (reason `insufficient_funds`).
 */
import type { Transaction } from 'kysely';
import type { BillingDB } from '../db/schema.ts';
import type { BillingContext } from './context.ts';
import { getHold } from './holds.ts';
import { Dec } from './money.ts';
import { costOfHours, costOfMinutes } from './pricing.ts';
import { billableMinutes } from './session-end.ts';
import { topUpHold } from './session-hold.ts';
import { type SessionRow, sessionJson } from './session-json.ts';

export interface BillOutcome {
  session: SessionRow;
  /** Cost billed by this call (0 when no new full minute passed). */
  billed: Dec;
  /** Whether the grace period is over: the caller must terminate the session. */
  expired: boolean;
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
  usage?: { actualPowerW: string; lastUsageAt: Date },
): Promise<BillOutcome> {
  const now = ctx.now();
  const hourly = new Dec(session.total_hourly_rate);
  const elapsed = now.getTime() - new Date(session.started_at).getTime();
  const minutes = Math.max(billableMinutes(elapsed, false), session.billed_minutes);
  const cost = costOfMinutes(hourly, minutes, ctx.scale);
  const billed = cost.minus(session.total_cost);

  const periodCost = (ms: number) => costOfHours(hourly, new Dec(ms).div(3_600_000), ctx.scale);
  const lowWater = cost.plus(periodCost(ctx.sessions.holdTopUpBelowMs));
  const nextPeriod = cost.plus(periodCost(ctx.sessions.billingIntervalMs));
  const hold = await getHold(trx, session.hold_id);
  let held = new Dec(hold?.remaining ?? 0);
  // Only a hold running low touches the renter's accounts (locks them, tops up from available).
  if (held.lt(lowWater) || held.lt(nextPeriod)) {
    held = (await topUpHold(trx, session, cost.plus(periodCost(ctx.sessions.initialPeriodMs)))).held;
  }
  const covered = held.gte(nextPeriod);

  let status = session.status;
  let graceUntil = session.grace_until ? new Date(session.grace_until) : null;
  let event: 'session.grace_period' | 'session.resumed' | null = null;
  if (!covered && status === 'active') {
    status = 'grace_period';
    graceUntil = new Date(now.getTime() + ctx.sessions.gracePeriodMs);
    event = 'session.grace_period';
  } else if (covered && status === 'grace_period') {
    status = 'active';
    graceUntil = null;
    event = 'session.resumed';
  }
  const updated = await trx
    .updateTable('rental_sessions')
    .set({
      billed_minutes: minutes,
      total_cost: cost.toFixed(),
      status,
      grace_until: graceUntil,
      updated_at: now,
      ...(usage ? { actual_power_w: usage.actualPowerW, last_usage_at: usage.lastUsageAt } : {}),
    })
    .where('id', '=', session.id)
    .returningAll()
    .executeTakeFirstOrThrow();
  if (event) await ctx.events.record(trx, event, { session: sessionJson(updated, ctx.scale) }, correlationId);
  const expired = status === 'grace_period' && graceUntil !== null && graceUntil.getTime() <= now.getTime();
  return { session: updated, billed, expired };
}
