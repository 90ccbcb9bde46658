/**
 * The daemon's reports of a workload, what they do to its session's bill, and the deadline of a workload that never
 * runs.
 *
 * - `running`: billing's clock starts (`billed_from`: the reported time, kept within `[started_at, now]` and no earlier
 *   than `billing.max_clock_skew` before now), and a capped session's deadline is counted from it. Preparation (the
 *   time between `start-session` and `running`: the daemon's sandbox, inputs) is not billed.
 * - `exited`, `failed`, `stopped`: the session ends at the reported time (kept within `[billed_from, now]`), billed to
 *   its last started minute, with the workload's end reason (`sessionEndReason`); a stop after the session ended (it
 *   ended first, for any reason) only records when the workload stopped: nothing after the session's end is billed.
 * - A workload still `pending` or `preparing` `billing.workload_start_timeout` after its session started ends its
 *   session (`terminated`, `workload_not_started`, nothing billed, or only the first minute of one that took GPUs back;
 *   a fault of the machine's) and is marked `failed`; so does a report that it failed for the machine's fault.
 *
 * `preparing` and `running` for a session that has ended are refused (409 SESSION_NOT_ACTIVE): the daemon starts
 * nothing for it, and stops what it started. A `running` time is never before the `preparing` report.
 *
 * Who reports: the machine's daemon (or its owner), admins and platform services; never the renter.
 */
import type { Principal } from '@gpu/common';
import { workloadSpecSchema } from '@gpu/common';
import type { Transaction } from 'kysely';
import type { BillingDB } from '../../db/schema.ts';
import { findWorkload, sessionsWaitingSince, updateWorkload, type WorkloadRow } from '../../db/workload-repository.ts';
import { billingErrors } from '../../errors.ts';
import { assertSessionParty, mayReportUsage, notSessionProvider } from '../access.ts';
import type { BillingContext } from '../context.ts';
import { stateNotedLeases } from '../leases/index.ts';
import { Dec, getHold } from '../ledger/index.ts';
import {
  finishSession,
  isRunning,
  loadSession,
  paidUntil,
  reportedStop,
  type SessionRow,
  startClock,
} from '../sessions/index.ts';
import { isEnded, movesForward, sessionEndReason, type Workload, type WorkloadReport } from './workload.ts';

/**
 * The most started minutes a session whose workload never ran (`workload_not_started`: the machine's fault) pays: none
 * for one billed from its workload's start (its clock never started), the first for one that took GPUs back (billed
 * from its start: no eviction is free, and a machine that never starts an evicting renter's work earns no more).
 */
const NEVER_RAN_MINUTES = 1;

/** A workload row as the domain's value. */
function workloadOf(row: WorkloadRow): Workload {
  return {
    sessionId: row.session_id,
    spec: workloadSpecSchema.parse(typeof row.spec === 'string' ? JSON.parse(row.spec) : row.spec),
    state: row.state,
    exitCode: row.exit_code,
    reason: row.reason,
    createdAt: row.created_at,
    preparingAt: row.preparing_at,
    runningAt: row.running_at,
    endedAt: row.ended_at,
    outputs: (typeof row.outputs === 'string' ? JSON.parse(row.outputs) : row.outputs) as Workload['outputs'],
    outputsRefused: (typeof row.outputs_refused === 'string'
      ? JSON.parse(row.outputs_refused)
      : row.outputs_refused) as Workload['outputsRefused'],
    reach: { bytesIn: Number(row.reach_bytes_in ?? 0), bytesOut: Number(row.reach_bytes_out ?? 0) },
  };
}

/** Until when the session's funds pay for running (the session's clock), or null once it ended. */
async function paidUntilOf(ctx: BillingContext, session: SessionRow): Promise<Date | null> {
  if (!isRunning(session)) return null;
  const hold = await getHold(ctx.db, session.hold_id);
  return paidUntil(ctx, session, new Dec(hold?.remaining ?? 0));
}

/** The session and its workload, as its parties read them; 404 WORKLOAD_NOT_FOUND for a session that runs none. */
export async function readWorkload(
  ctx: BillingContext,
  actor: Principal,
  sessionId: string,
): Promise<{ session: SessionRow; workload: Workload; paidUntil: Date | null }> {
  // The workload first: a workload's end and its session's end commit together, so the session read after it is at
  // least as new (read the other way round, a workload just ended could show beside its session still running).
  const row = await findWorkload(ctx.db, sessionId);
  const session = await loadSession(ctx.db, sessionId);
  assertSessionParty(actor, session);
  if (!row) throw billingErrors.workloadNotFound(sessionId);
  return { session, workload: workloadOf(row), paidUntil: await paidUntilOf(ctx, session) };
}

/**
 * Applies the daemon's report (idempotent: a state already reached or passed changes nothing; a report after the
 * workload ended, of another end, is 409 WORKLOAD_ENDED); the session and workload after it.
 */
export async function reportWorkload(
  ctx: BillingContext,
  actor: Principal,
  sessionId: string,
  report: WorkloadReport,
  correlationId?: string,
): Promise<{ session: SessionRow; workload: Workload }> {
  const reported = await ctx.db.transaction().execute(async (trx) => {
    const session = await loadSession(trx, sessionId, true);
    if (!mayReportUsage(actor, session)) throw notSessionProvider(sessionId);
    const row = await findWorkload(trx, sessionId);
    if (!row) throw billingErrors.workloadNotFound(sessionId);
    if (isEnded(row.state)) {
      if (row.state === report.state) return { session, workload: workloadOf(row) };
      throw billingErrors.workloadEnded(sessionId, row.state);
    }
    if (!movesForward(row.state, report.state)) return { session, workload: workloadOf(row) };
    // A session that ended (its renter, its cap, its funds, its machine) runs nothing more: the daemon must not start
    // it, nor go on running it (409 SESSION_NOT_ACTIVE). Only its end is still recorded.
    if ((report.state === 'preparing' || report.state === 'running') && !isRunning(session)) {
      throw billingErrors.sessionNotActive(sessionId, session.status);
    }
    const now = ctx.now();
    if (report.state === 'preparing') {
      const written = await updateWorkload(trx, sessionId, { state: 'preparing', preparing_at: now, updated_at: now });
      return { session, workload: workloadOf(written) };
    }
    if (report.state === 'running') {
      // The session's clock starts (and keeps the reported time within its bounds); the workload runs from then.
      const { session: billed, at } = await startClock(ctx, trx, session, report.at, row.preparing_at);
      const written = await updateWorkload(trx, sessionId, { state: 'running', running_at: at, updated_at: now });
      await ctx.events.record(trx, { kind: 'workload.running', session: billed }, correlationId);
      return { session: billed, workload: workloadOf(written) };
    }
    const ended = await endWorkload(ctx, trx, session, row, report, correlationId);
    await stateNotedLeases(ctx, trx, correlationId);
    return ended;
  });
  // Its session ended with it: a job it ran is settled now, and its GPUs are free for queued jobs.
  if (reported.session.ended_at) ctx.state.wakeJobs('capacity');
  return reported;
}

/** Records the workload's end and ends its session at that time (unless the session had ended already). */
async function endWorkload(
  ctx: BillingContext,
  trx: Transaction<BillingDB>,
  session: SessionRow,
  row: WorkloadRow,
  report: WorkloadReport,
  correlationId?: string,
): Promise<{ session: SessionRow; workload: Workload }> {
  const now = ctx.now();
  const at = reportedStop(ctx, session, new Date(row.running_at ?? session.started_at), report.at);
  const written = await updateWorkload(trx, session.id, {
    state: report.state,
    exit_code: report.state === 'exited' ? (report.exitCode ?? null) : null,
    reason: report.state === 'exited' ? null : (report.reason ?? null),
    ended_at: at,
    updated_at: now,
  });
  if (!isRunning(session)) return { session, workload: workloadOf(written) };
  const reason = sessionEndReason(report) ?? 'workload_stopped';
  // Only a workload that never ran: one reported running and then failed is billed to its end as any other.
  const neverRan =
    reason === 'workload_not_started' && row.running_at === null ? { startedMinutesAtMost: NEVER_RAN_MINUTES } : {};
  const end = await finishSession(ctx, trx, session, { status: 'completed', reason, at, ...neverRan }, correlationId);
  return { session: end.session, workload: workloadOf(written) };
}

/**
 * Ends the running sessions whose workload has waited longer than `billing.workload_start_timeout` to run (the sweep
 * of the cap's timer runs it); how many it ended.
 */
export async function endWorkloadsNeverStarted(ctx: BillingContext, pageSize = 100): Promise<number> {
  const before = new Date(ctx.now().getTime() - ctx.sessions.workloadStartTimeoutMs);
  const due = await sessionsWaitingSince(ctx.db, before, pageSize);
  let ended = 0;
  for (const id of due) {
    await ctx.db.transaction().execute(async (trx) => {
      const session = await loadSession(trx, id, true);
      const row = await findWorkload(trx, id);
      if (!row || !isRunning(session) || movesForward('preparing', row.state)) return;
      const now = ctx.now();
      await updateWorkload(trx, id, { state: 'failed', reason: 'not_started', ended_at: now, updated_at: now });
      await finishSession(ctx, trx, session, {
        status: 'terminated',
        reason: 'workload_not_started',
        startedMinutesAtMost: NEVER_RAN_MINUTES,
      });
      await stateNotedLeases(ctx, trx);
      ended++;
    });
  }
  return ended;
}
