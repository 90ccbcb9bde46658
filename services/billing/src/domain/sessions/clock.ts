/**
 * The session's clock: every time a rental session keeps, worked out here and nowhere else.
 *
 * - **Billed from** (`billedFrom`): a session without a workload is billed from its start; one with a workload from
 *   when the workload was reported running (`startClock`), never before the session started or the workload's
 *   preparation was reported, nor more than `billing.max_clock_skew` before billing's own clock, nor after it; one
 *   that took GPUs back from interruptible sessions from its start, whatever it runs (sessions/start.ts).
 * - **The cap's deadline** (`cap_ends_at`): when the spend cap at the frozen rate is used up, counted from when
 *   billing starts (the start, or the workload's `running`).
 * - **Grace** (`graceDeadline`): how long a session that funds no longer cover runs on before it is ended.
 * - **The end** (`endOf`): when the session ends (now, or the earlier time its workload reported stopping) and how
 *   many minutes that bills.
 * - **Paid until** (`paidUntil`): until when the session's hold pays, for a daemon that loses billing to stop its
 *   workload by itself.
 *
 * Workloads translate the daemon's reports into calls here; the biller and the usage path read the deadlines. Every
 * time is billing's clock (`ctx.now()`), never the daemon's: a reported time is only ever kept within these bounds.
 */
import type { Transaction } from 'kysely';
import type { BillingDB } from '../../db/schema.ts';
import { startSessionClock } from '../../db/session-repository.ts';
import type { BillingContext } from '../context.ts';
import { Dec } from '../ledger/index.ts';
import { billableMinutes, msPaidFor, msPaidForSession } from '../pricing/index.ts';
import type { EndKind, SessionRow } from './session.ts';

type ClockFields = Pick<SessionRow, 'workload' | 'billed_from' | 'started_at'>;

const clamp = (t: number, lo: number, hi: number) => new Date(Math.min(Math.max(t, lo), hi));

/**
 * When billing's clock started for the session: its start, or, for a session that runs a workload, when the workload
 * was reported running (null until then: nothing is billed before).
 */
export function billedFrom(s: ClockFields): Date | null {
  if (!s.workload) return new Date(s.started_at);
  return s.billed_from ? new Date(s.billed_from) : null;
}

/** Milliseconds billed from `billedFrom` until `at` (0 before billing started). */
export function billedElapsedMs(s: ClockFields, at: Date): number {
  const from = billedFrom(s);
  return from ? Math.max(0, at.getTime() - from.getTime()) : 0;
}

/** When a spend cap at `hourlyRate` is used up, billing from `from` (null: no cap). */
export function capDeadline(spendCap: Dec | null | undefined, hourlyRate: Dec, from: Date): Date | null {
  return spendCap ? new Date(from.getTime() + msPaidFor(spendCap, hourlyRate)) : null;
}

/** When the session's spend cap is used up at its rates by minute (null: no cap, or its clock has not started). */
export function capDeadlineOf(s: SessionRow): Date | null {
  const from = billedFrom(s);
  if (s.spend_cap === null || from === null) return null;
  return new Date(from.getTime() + msPaidForSession(s, new Dec(s.spend_cap)));
}

/** Whether the time the session's cap paid for is over at `now`. */
export const capTimeOver = (s: Pick<SessionRow, 'cap_ends_at'>, now: Date) =>
  s.cap_ends_at !== null && now.getTime() >= new Date(s.cap_ends_at).getTime();

/** Until when a session that falls into grace at `now` runs on unless funds come. */
export const graceDeadline = (ctx: BillingContext, now: Date) => new Date(now.getTime() + ctx.sessions.gracePeriodMs);

/** Whether a session's grace ran out by `now`. */
export const graceOver = (s: { status: string; graceUntil: Date | null }, now: Date) =>
  s.status === 'grace_period' && s.graceUntil !== null && s.graceUntil.getTime() <= now.getTime();

/**
 * Starts billing's clock for a workload session whose workload was reported running at `reportedAt` (its row locked
 * by the caller), and counts a capped session's deadline from then: the session as written, and the time kept (a
 * session whose clock started with it keeps its clock; the time is then only the workload's).
 * `preparedAt`: when its preparation was reported (the clock never starts before it: preparing is not billed).
 */
export async function startClock(
  ctx: BillingContext,
  trx: Transaction<BillingDB>,
  session: SessionRow,
  reportedAt: Date,
  preparedAt: Date | null,
): Promise<{ session: SessionRow; at: Date }> {
  const now = ctx.now().getTime();
  const started = new Date(session.started_at).getTime();
  const prepared = preparedAt ? new Date(preparedAt).getTime() : started;
  const at = clamp(reportedAt.getTime(), Math.max(started, prepared, now - ctx.sessions.maxClockSkewMs), now);
  // A clock that started with the session (it took GPUs back) stays where it is; the workload runs from `at`.
  if (session.billed_from) return { session, at };
  const cap = session.spend_cap === null ? null : new Dec(session.spend_cap);
  // At its rates by minute: a bid changed before the clock started already has them.
  const capEndsAt = cap ? new Date(at.getTime() + msPaidForSession(session, cap)) : null;
  await startSessionClock(trx, session.id, at, capEndsAt);
  return { session: { ...session, billed_from: at, cap_ends_at: capEndsAt }, at };
}

/**
 * When a workload that began at `from` (its `running` time, or the session's start) and reported stopping at
 * `reportedAt` stopped: kept between its beginning and the session's end (now, while the session runs).
 */
export function reportedStop(ctx: BillingContext, session: SessionRow, from: Date, reportedAt: Date): Date {
  const until = session.ended_at ? new Date(session.ended_at).getTime() : ctx.now().getTime();
  return clamp(reportedAt.getTime(), Math.min(from.getTime(), until), until);
}

/**
 * When a session ending now ends (`now`, or the earlier time its workload stopped), and the minutes that bills: every
 * started minute for a normal end, to the last full minute for a termination, never fewer than billed so far; minutes
 * known to have been delivered (a machine gone offline; a workload that ended at `at`) exactly, even below those
 * billed so far (those were only held, never captured), and so are the few started minutes a session whose workload
 * never ran may cost (`startedMinutesAtMost`).
 */
export function endOf(session: SessionRow, kind: EndKind, now: Date): { endedAt: Date; minutes: number } {
  const endedAt = kind.status === 'completed' && kind.at && kind.at < now ? kind.at : now;
  const elapsed = billedElapsedMs(session, endedAt);
  const minutes =
    kind.startedMinutesAtMost !== undefined
      ? Math.min(kind.startedMinutesAtMost, billableMinutes(elapsed, true))
      : kind.status === 'terminated' && kind.deliveredMinutes !== undefined
        ? Math.min(kind.deliveredMinutes, billableMinutes(elapsed, false))
        : endedAt < now
          ? billableMinutes(elapsed, true)
          : Math.max(billableMinutes(elapsed, kind.status === 'completed'), session.billed_minutes);
  return { endedAt, minutes };
}

/**
 * Until when the session's funds pay for running (`held`: what its hold still holds), for a daemon that loses billing
 * to stop the workload by itself: the hold at the frozen rate from `billed_from` (from now while it has not run yet),
 * never past a cap's end. The hold is topped up as the session runs, so the time moves on while billing is reachable.
 */
export function paidUntil(ctx: BillingContext, session: SessionRow, held: Dec): Date {
  const from = session.billed_from ? new Date(session.billed_from).getTime() : ctx.now().getTime();
  const paid = from + msPaidForSession(session, held);
  return new Date(session.cap_ends_at ? Math.min(paid, new Date(session.cap_ends_at).getTime()) : paid);
}
