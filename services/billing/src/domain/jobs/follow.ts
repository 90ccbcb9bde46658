/**
 * Following running jobs: a job whose session has ended is settled from how it ended. Its workload exited 0: the job
 * succeeded. The machine failed it (went offline, its daemon lost the workload, its owner took it back: the platform's
 * provider-fault reasons): the job is recovering, placed again (another machine first) while it has attempts and
 * spend cap left. The workload failed or exited non-zero: the job failed, unless its renter asked for retries on
 * failure. Its cap or funds ran out: failed. Its renter ended the session by hand: cancelled. Each attempt keeps its
 * cost; the job's `spent` is theirs together.
 */
import { PROVIDER_FAULT_END_REASONS } from '@gpu/common';
import { claimEndedRunningJobs, endAttempt, type JobRow, sessionOutcome, updateJob } from '../../db/job-repository.ts';
import type { JobState } from '../../db/schema.ts';
import type { BillingContext } from '../context.ts';
import { Dec } from '../ledger/index.ts';

const FAULTS: ReadonlySet<string> = new Set(PROVIDER_FAULT_END_REASONS);

/** Settles the running jobs whose session ended; how many. */
export async function followJobs(ctx: BillingContext): Promise<number> {
  return ctx.db.transaction().execute(async (trx) => {
    const jobs = await claimEndedRunningJobs(trx, 50);
    for (const job of jobs) {
      const sessionId = job.session_id!;
      const o = await sessionOutcome(trx, sessionId);
      const cost = o.total_cost ?? '0';
      const endReason = o.end_reason ?? 'ended';
      await endAttempt(trx, job.id, sessionId, { ended_at: o.ended_at ?? ctx.now(), cost, end_reason: endReason });
      const spent = new Dec(job.spent).plus(cost);
      const [state, reason] = settle(job, spent, endReason, o.workload_state, o.exit_code);
      const now = ctx.now();
      await updateJob(trx, job.id, {
        state,
        reason,
        spent: spent.toFixed(ctx.scale),
        place_after: now,
        ended_at: state === 'recovering' ? null : now,
        updated_at: now,
      });
    }
    return jobs.length;
  });
}

function settle(
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
  if (workloadState === 'exited' || endReason === 'workload_failed' || endReason === 'workload_limit') {
    const why =
      workloadState === 'exited'
        ? `workload_exited: the workload exited with ${exitCode}`
        : `${endReason}: the workload could not run to its end`;
    return job.retry_on_failure ? again(why) : ['failed', why];
  }
  if (endReason === 'workload_max_runtime') return ['failed', 'workload_max_runtime: it ran past its max_runtime'];
  if (endReason === 'spend_cap' || endReason === 'insufficient_funds') return ['failed', endReason];
  if (endReason === 'job_cancelled') return ['cancelled', 'cancelled by its renter'];
  return ['cancelled', `its session was ended (${endReason})`];
}
