/** What a session has used so far (GET current-usage) and the billing history (GET history). */
import type { Kysely } from 'kysely';
import {
  type BillingRecordFilter,
  type BillingRecordRow,
  listBillingRecords,
} from '../db/billing-record-repository.ts';
import type { BillingDB } from '../db/schema.ts';
import type { BillingContext } from './context.ts';
import { getHold } from './holds.ts';
import { type KeysetPosition, keysetPage, type Page } from './keyset.ts';
import { walletBalances } from './ledger.ts';
import { Dec } from './money.ts';
import { costOfMinutes } from './pricing.ts';
import { billableMinutes } from './session-end.ts';
import { isRunning, loadSession } from './session-json.ts';
import { runtimeMinutes } from './session-start.ts';

/** Current usage: for a running session, what ending it now would bill. */
export async function currentUsage(ctx: BillingContext, sessionId: string) {
  const s = await loadSession(ctx.db, sessionId);
  const fmt = (d: Dec) => d.toFixed(ctx.scale);
  const hourly = new Dec(s.total_hourly_rate);
  const running = isRunning(s);
  const until = running ? ctx.now() : new Date(s.ended_at ?? s.started_at);
  const elapsedMs = Math.max(0, until.getTime() - new Date(s.started_at).getTime());
  const minutes = running ? Math.max(billableMinutes(elapsedMs, true), s.billed_minutes) : s.billed_minutes;
  const cost = running ? costOfMinutes(hourly, minutes, ctx.scale) : new Dec(s.total_cost);
  const hold = await getHold(ctx.db, s.hold_id);
  const held = running && hold ? new Dec(hold.remaining) : new Dec(0);
  const holdLeft = Dec.max(held.minus(cost), 0);
  const available = running ? new Dec((await walletBalances(ctx.db, s.wallet_id, ctx.scale))?.available ?? 0) : null;
  return {
    session_id: s.id,
    status: s.status,
    started_at: new Date(s.started_at).toISOString(),
    elapsed_seconds: Math.floor(elapsedMs / 1000),
    elapsed_minutes: minutes,
    total_hourly_rate: hourly.toFixed(Math.max(ctx.scale, hourly.decimalPlaces())),
    cost_so_far: fmt(cost),
    billed_minutes: s.billed_minutes,
    billed_cost: fmt(new Dec(s.total_cost)),
    hold_amount: fmt(held),
    hold_remaining: fmt(holdLeft),
    available_balance: available ? fmt(available) : null,
    estimated_remaining_minutes: available ? runtimeMinutes(holdLeft.plus(available), hourly) : 0,
    actual_power_w: s.actual_power_w === null ? null : new Dec(s.actual_power_w).toFixed(),
    last_usage_at: s.last_usage_at ? new Date(s.last_usage_at).toISOString() : null,
    grace_until: s.grace_until ? new Date(s.grace_until).toISOString() : null,
  };
}

export interface HistoryFilter extends BillingRecordFilter {
  limit: number;
  /** Where the previous page ended. */
  after?: KeysetPosition;
}

/** Billing records, newest end first, filtered; `[from, to)` on the end time; keyset pagination. */
export async function billingHistory(db: Kysely<BillingDB>, f: HistoryFilter): Promise<Page<BillingRecordRow>> {
  return keysetPage(await listBillingRecords(db, f, f.after, f.limit + 1), f.limit);
}
