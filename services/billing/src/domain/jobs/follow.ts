/**
 * Following jobs' attempts: each attempt not ended yet is settled once its session has ended, and a session that runs
 * while its job does not follow it is adopted or ended. One path for every way an attempt can end up:
 *
 * - **Its session ended** (its workload's end, its machine's fault, its cap, its renter, a cancel): the attempt keeps
 *   the session's cost and end reason, and the job's `spent` grows by that cost, once. A job that ran that session
 *   is decided by how it ended: the workload exited 0, `succeeded`; its machine failed it (went offline, its daemon
 *   lost the workload, its owner took it back: the platform's provider-fault reasons), `recovering`, placed again
 *   while attempts and spend cap are left; the workload failed or exited non-zero, `failed` unless its renter asked
 *   for retries on failure; its runtime, cap or funds ran out, `failed`; its renter ended the session by hand,
 *   `cancelled`.
 * - **Its session runs, but its job does not follow it** (a placer lost its lease after starting it, or died): a job
 *   waiting to be placed adopts it (`running`); a job that ended meanwhile (cancelled, failed) has it ended now.
 * - **It was never started** (its placer died between writing it and starting the session): ended, `not_started`,
 *   at no cost, once `jobs.placing_timeout` has passed.
 */
import { durationMs, PROVIDER_FAULT_END_REASONS, UNDELIVERED_END_REASONS } from '@gpu/common';
import {
  attemptsOf,
  attemptsToSettle,
  endAttempt,
  findAttempt,
  findJob,
  type JobRow,
  runJobSession,
  sessionOutcome,
  updateJob,
} from '../../db/job-repository.ts';
import type { JobState } from '../../db/schema.ts';
import type { BillingContext } from '../context.ts';
import { Dec } from '../ledger/index.ts';
import { endSession, isRunning } from '../sessions/index.ts';
import { isEnded, type JobSettings } from './job.ts';

const FAULTS: ReadonlySet<string> = new Set(PROVIDER_FAULT_END_REASONS);

/** Settles the attempts that need it; how many were looked at. */
export async function followJobs(ctx: BillingContext, settings: JobSettings): Promise<number> {
  const now = ctx.now();
  const stale = new Date(now.getTime() - durationMs(settings.placing_timeout));
  const due = await attemptsToSettle(ctx.db, now, stale, 100);
  for (const a of due) {
    try {
      await settleAttempt(ctx, a.job_id, a.session_id, stale, settings.final_checkpoint_wait);
    } catch (err) {
      ctx.logger.warn(
        { err, job_id: a.job_id, session_id: a.session_id },
        'settling a job attempt failed; tried again',
      );
    }
  }
  return due.length;
}

/**
 * Settles one attempt (a no-op for one settled already); ends its session first when its job has ended. A job placed
 * again waits up to `finalCheckpointWait` for the attempt's final checkpoint (`jobs.final_checkpoint_wait`).
 */
export async function settleAttempt(
  ctx: BillingContext,
  jobId: string,
  sessionId: string,
  stale: Date,
  finalCheckpointWait = '0s',
): Promise<void> {
  const toEnd = await ctx.db.transaction().execute(async (trx) => {
    const job = await findJob(trx, jobId, true);
    const attempt = await findAttempt(trx, sessionId);
    if (!job || !attempt || attempt.ended_at) return null;
    const now = ctx.now();
    const o = await sessionOutcome(trx, sessionId);
    if (!o) {
      if (attempt.started_at > stale) return null;
      await endAttempt(trx, jobId, sessionId, { ended_at: now, cost: '0', end_reason: 'not_started' });
      return null;
    }
    if (isRunning(o)) {
      if (isEnded(job.state)) return job.state;
      const placing = job.state === 'placing' && job.placing_until !== null && job.placing_until > now;
      const follows = job.state === 'running' && job.session_id === sessionId;
      if (!placing && !follows) {
        await runJobSession(trx, jobId, sessionId, now);
      }
      return null;
    }
    const cost = o.total_cost ?? '0';
    const endReason = o.end_reason ?? 'ended';
    await endAttempt(trx, jobId, sessionId, { ended_at: o.ended_at ?? now, cost, end_reason: endReason });
    const spent = new Dec(job.spent).plus(cost);
    const followed = job.state === 'running' && job.session_id === sessionId;
    // A session that ran for the job though the job never followed it (its placer died, or lost the job, after
    // starting it, and it ended before anyone adopted it): still the job's work, when it is the job's latest attempt
    // and the job has not ended. Its end decides the job as a followed one's would: a job is never run (and paid for)
    // again because its placer did not live to say it ran.
    const orphan =
      !followed && !isEnded(job.state) && job.state !== 'running' && (await latestAttempt(trx, jobId)) === attempt.n;
    if (!followed && !orphan) {
      await updateJob(trx, jobId, { spent: spent.toFixed(ctx.scale), updated_at: now });
      return null;
    }
    const [state, reason] = nextState(job, spent, endReason, o.workload_state, o.exit_code);
    await updateJob(trx, jobId, {
      state,
      reason,
      spent: spent.toFixed(ctx.scale),
      place_after: now,
      final_checkpoint_until:
        state === 'recovering' && awaitsFinalCheckpoint(job, endReason, o.final_checkpoint_at)
          ? new Date(now.getTime() + durationMs(finalCheckpointWait))
          : null,
      // A placement that still holds the job (its placer alive, not yet past placing its attempt) loses it.
      placing_until: null,
      ended_at: state === 'recovering' ? null : now,
      updated_at: now,
    });
    return null;
  });
  if (toEnd) {
    const reason = toEnd === 'cancelled' ? 'job_cancelled' : 'job_ended';
    await endSession(ctx, sessionId, { status: 'completed', reason });
    await settleAttempt(ctx, jobId, sessionId, stale, finalCheckpointWait);
  }
}

const GONE: ReadonlySet<string> = new Set([...UNDELIVERED_END_REASONS, 'workload_not_started']);

/**
 * Whether the job placed again waits for its ended attempt's final checkpoint: its workload keeps one, it ran, its
 * machine is still there to pack it (its daemon keeps the checkpoint directory after reporting the end, and a next
 * attempt placed at once would start a whole interval back), and it has not been said already (kept whole, or none:
 * the daemon may say so before the attempt is settled). A checkpoint the attempt kept while it ran is not its final
 * one: the next attempt would restore it, and lose what the workload did after it.
 */
export function awaitsFinalCheckpoint(job: Pick<JobRow, 'workload'>, endReason: string, saidAt: Date | null): boolean {
  if (!(job.workload as { checkpoint?: unknown }).checkpoint) return false;
  return !GONE.has(endReason) && saidAt === null;
}

/** The number of the job's latest attempt (its lock held by the caller). */
async function latestAttempt(db: Parameters<typeof attemptsOf>[0], jobId: string): Promise<number> {
  return Math.max(0, ...(await attemptsOf(db, [jobId])).map((a) => a.n));
}

/** What the job becomes when the session it ran ended. */
function nextState(
  job: JobRow,
  spent: Dec,
  endReason: string,
  workloadState: string | null,
  exitCode: number | null,
): [JobState, string | null] {
  const again = (why: string): [JobState, string] => {
    if (job.attempts >= job.max_attempts) return ['failed', `${why}; attempts_exhausted: ${job.attempts} used`];
    if (spent.gte(job.spend_cap)) return ['failed', `${why}; spend_cap: ${spent.toFixed()} spent`];
    return ['recovering', `${why}; placing attempt ${job.attempts + 1} of ${job.max_attempts}`];
  };
  if (workloadState === 'exited' && exitCode === 0) return ['succeeded', null];
  if (FAULTS.has(endReason)) return again(`attempt ${job.attempts} lost its machine (${endReason})`);
  if (endReason === 'preempted') return again(`attempt ${job.attempts} was preempted (a higher bid took its GPUs)`);
  if (workloadState === 'exited' || endReason === 'workload_failed' || endReason === 'workload_limit') {
    const why =
      workloadState === 'exited'
        ? `workload_exited: the workload exited with ${exitCode}`
        : `${endReason}: the workload could not run to its end`;
    return job.retry_on_failure ? again(why) : ['failed', why];
  }
  if (endReason === 'workload_max_runtime') return ['failed', 'workload_max_runtime: it ran past its max_runtime'];
  if (endReason === 'workload_stopped') return ['failed', 'workload_stopped: its machine stopped it'];
  if (endReason === 'spend_cap' || endReason === 'insufficient_funds') return ['failed', endReason];
  return ['cancelled', `its session was ended (${endReason})`];
}
