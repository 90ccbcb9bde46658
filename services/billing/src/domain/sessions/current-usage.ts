/** What a session has used so far (GET current-usage), the billing history (GET history) and session events (GET events). */
import type { Principal } from '@gpu/common';
import type { Kysely } from 'kysely';
import {
  type BillingRecordFilter,
  type BillingRecordRow,
  listBillingRecords,
} from '../../db/billing-record-repository.ts';
import type { BillingDB } from '../../db/schema.ts';
import { listSessionEvents, purgeSessionEvents, type SessionEventRow } from '../../db/session-event-repository.ts';
import { listSessions, purgeUsageRecords, type SessionFilter } from '../../db/session-repository.ts';
import { assertSessionParty, historyScope, seesRenterWallet } from '../access.ts';
import type { BillingContext } from '../context.ts';
import { type KeysetPosition, keysetPage, type Page } from '../keyset.ts';
import { Dec, getHold, walletBalances } from '../ledger/index.ts';
import { billableMinutes, costOfSessionMinutes } from '../pricing/index.ts';
import { billedElapsedMs } from './clock.ts';
import { isRunning, loadSession, type SessionRow } from './session.ts';
import { runtimeMinutes } from './start.ts';

/** What a session has used so far; for a running session, what ending it now would bill. */
export interface CurrentUsage {
  session: SessionRow;
  elapsedMs: number;
  /** Started minutes: what ending now bills (the billed minutes once ended). */
  minutes: number;
  hourlyRate: Dec;
  /** What ending now would cost (the final cost once ended). */
  cost: Dec;
  /** Held for the session (0 once ended). */
  held: Dec;
  /** held - cost, never below 0. */
  holdLeft: Dec;
  /** The renter's available balance (null once ended, and for the provider side: it is the renter's). */
  available: Dec | null;
  estimatedRemainingMinutes: number;
}

/** Current usage of a session, for a party of it (its renter, the provider's owner or daemon) or the privileged. */
export async function currentUsage(ctx: BillingContext, actor: Principal, sessionId: string): Promise<CurrentUsage> {
  const s = await loadSession(ctx.db, sessionId);
  assertSessionParty(actor, s);
  const hourly = new Dec(s.total_hourly_rate);
  const running = isRunning(s);
  const until = running ? ctx.now() : new Date(s.ended_at ?? s.started_at);
  const elapsedMs = billedElapsedMs(s, until);
  const minutes = running ? Math.max(billableMinutes(elapsedMs, true), s.billed_minutes) : s.billed_minutes;
  const cap = s.spend_cap === null ? null : new Dec(s.spend_cap);
  const uncapped = costOfSessionMinutes(s, minutes, ctx.scale);
  const cost = running ? (cap ? Dec.min(uncapped, cap) : uncapped) : new Dec(s.total_cost);
  const hold = await getHold(ctx.db, s.hold_id);
  const held = running && hold ? new Dec(hold.remaining) : new Dec(0);
  const holdLeft = Dec.max(held.minus(cost), 0);
  // The renter's wallet is the renter's business: the provider side sees the hold only.
  const renterView = seesRenterWallet(actor, s);
  const available =
    running && renterView ? new Dec((await walletBalances(ctx.db, s.wallet_id, ctx.scale))?.available ?? 0) : null;
  return {
    session: s,
    elapsedMs,
    minutes,
    hourlyRate: hourly,
    cost,
    held,
    holdLeft,
    available,
    // What the funds pay for, and no further than the spend cap.
    estimatedRemainingMinutes: running
      ? Math.min(
          runtimeMinutes(holdLeft.plus(available ?? 0), hourly),
          cap ? runtimeMinutes(cap.minus(cost), hourly) : Number.MAX_SAFE_INTEGER,
        )
      : 0,
  };
}

export interface HistoryFilter extends BillingRecordFilter {
  limit: number;
  /** Where the previous page ended. */
  after?: KeysetPosition;
}

/**
 * Billing records, newest end first, filtered; `[from, to)` on the end time; keyset pagination. A user (or their
 * daemon) sees the sessions they rented or provided; admins and services see all.
 */
export async function billingHistory(
  db: Kysely<BillingDB>,
  actor: Principal,
  f: HistoryFilter,
): Promise<Page<BillingRecordRow>> {
  const scoped = { ...f, party: historyScope(actor) };
  return keysetPage(await listBillingRecords(db, scoped, f.after, f.limit + 1), f.limit);
}

export interface SessionListFilter extends SessionFilter {
  limit: number;
  after?: KeysetPosition;
}

/**
 * Sessions, newest start first; keyset pagination. A user (or their daemon) sees the sessions they rent or that run
 * on their machines (a daemon finds the sessions to report usage for); admins and services see all.
 */
export async function sessionList(
  db: Kysely<BillingDB>,
  actor: Principal,
  f: SessionListFilter,
): Promise<Page<SessionRow>> {
  const scoped = { ...f, party: historyScope(actor) };
  return keysetPage(await listSessions(db, scoped, f.after, f.limit + 1), f.limit);
}

export interface SessionEventListFilter {
  sessionId?: string;
  kinds?: string[];
  limit: number;
  after?: KeysetPosition;
}

/**
 * Session events (started, low balance, grace period, resumed, completed, terminated), newest first; keyset
 * pagination. A user (or their daemon) reads the events of the sessions they rent or that run on their machines, as
 * NATS carries them; naming a session is 404 when it does not exist and 403 when the caller is no party of it.
 */
export async function sessionEventList(
  ctx: BillingContext,
  actor: Principal,
  f: SessionEventListFilter,
): Promise<Page<SessionEventRow>> {
  if (f.sessionId) assertSessionParty(actor, await loadSession(ctx.db, f.sessionId));
  const filter = { party: historyScope(actor), sessionId: f.sessionId, kinds: f.kinds };
  return keysetPage(await listSessionEvents(ctx.db, filter, f.after, f.limit + 1), f.limit);
}

/** Deletes session events older than `retentionMs`, in batches; how many went. */
export async function purgeOldSessionEvents(ctx: BillingContext, retentionMs: number): Promise<number> {
  let purged = 0;
  for (;;) {
    const n = await purgeSessionEvents(ctx.db, retentionMs, 5_000);
    purged += n;
    if (n < 5_000) return purged;
  }
}

/** Sessions whose usage records one statement of the purge deletes. */
const USAGE_PURGE_BATCH = 200;

/**
 * Deletes the usage records of sessions that ended more than `retentionMs` ago (by the service clock), a batch of
 * sessions at a time; how many sessions and records went.
 */
export async function purgeOldUsageRecords(
  ctx: BillingContext,
  retentionMs: number,
): Promise<{ sessions: number; records: number }> {
  const before = new Date(ctx.now().getTime() - retentionMs);
  const total = { sessions: 0, records: 0 };
  for (;;) {
    const n = await purgeUsageRecords(ctx.db, before, USAGE_PURGE_BATCH);
    total.sessions += n.sessions;
    total.records += n.records;
    if (n.sessions < USAGE_PURGE_BATCH) return total;
  }
}
