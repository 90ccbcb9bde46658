/**
 * The placer: billing's scheduler of jobs, a round every `jobs.place_interval` on each instance. Its state is the
 * jobs table, so a placer killed at any moment loses nothing and places nothing twice:
 *
 * - **Claim:** queued and recovering jobs that are due, `FOR UPDATE SKIP LOCKED` (two instances never take one job),
 *   marked `placing` until `placing_until` and committed; a placement whose placer died is taken over after that.
 * - **Place:** the market's offers that meet the job's terms, cheapest first, machines that failed the job last; the
 *   first that starts a session (its `job_id` the job's: at most one session of a job runs, the database's unique
 *   index) wins. The renter's price limit is the session's accepted rate, and what is left of the job's spend cap
 *   the session's cap, so no attempt can spend past the job's. A taker that finds the job's session already running
 *   (its placer died after starting it) adopts it.
 * - **Follow** (follow.ts): a running job whose session ended is settled.
 */
import { randomUUID } from 'node:crypto';
import { AppError, durationMs, type Principal } from '@gpu/common';
import {
  attemptsOf,
  claimJobsToPlace,
  findJob,
  insertAttempt,
  type JobRow,
  runningSessionOfJob,
  updateJob,
} from '../../db/job-repository.ts';
import type { BillingContext } from '../context.ts';
import { Dec } from '../ledger/index.ts';
import type { MarketOffer } from '../provider-directory.ts';
import { endSession } from '../sessions/index.ts';
import { startWorkloadSession } from '../workloads/index.ts';
import type { JobTerms } from './job.ts';

export interface JobSettings {
  place_interval: string;
  placing_timeout: string;
  retry_interval: string;
}

/** The placer acting for the platform: it starts a renter's session as the renter's job asks. */
const PLACER: Principal = Object.freeze({
  subject: 'job-placer',
  kind: 'client' as const,
  roles: ['service' as const],
  tokenId: 'job-placer',
});

/** Jobs one round claims at most. */
const CLAIM = 20;
/** Offers tried for one job in one round at most. */
const TRIES = 5;

/** Errors of a start that mean "not this machine": the next offer is tried. */
const NEXT_OFFER = new Set([
  'PRICE_NOT_ACCEPTED',
  'PROVIDER_NOT_AVAILABLE',
  'PROVIDER_NOT_FOUND',
  'GPU_GROUP_TOO_SMALL',
  'GPU_MODEL_REQUIRED',
  'WALLET_NOT_FOUND',
]);

/** Places the jobs that are due; how many were placed. */
export async function placeJobs(ctx: BillingContext, settings: JobSettings): Promise<number> {
  const now = ctx.now();
  const until = new Date(now.getTime() + durationMs(settings.placing_timeout));
  const claimed = await ctx.db.transaction().execute(async (trx) => {
    const jobs = await claimJobsToPlace(trx, now, CLAIM);
    for (const job of jobs) await updateJob(trx, job.id, { state: 'placing', placing_until: until, updated_at: now });
    return jobs;
  });
  let placed = 0;
  for (const job of claimed) {
    try {
      if (await placeJob(ctx, settings, job, until)) placed += 1;
    } catch (err) {
      ctx.logger.warn({ err, job_id: job.id }, 'placing a job failed; it is tried again');
      await requeue(ctx, settings, job, until, `placing failed: ${(err as Error).message}`).catch(() => {});
    }
  }
  return placed;
}

/** Whether the job now runs. */
async function placeJob(ctx: BillingContext, settings: JobSettings, job: JobRow, until: Date): Promise<boolean> {
  const now = ctx.now();
  // Its placer died after starting its session: that session is the attempt.
  const adopted = await runningSessionOfJob(ctx.db, job.id);
  if (adopted) return markRunning(ctx, job, until, adopted.id, adopted.provider_id);
  if (job.queued_until && now > job.queued_until) {
    await finish(ctx, job, until, 'failed', 'queue_timeout: no machine met its terms before its queue timeout');
    return false;
  }
  if (job.attempts >= job.max_attempts) {
    await finish(ctx, job, until, 'failed', `attempts_exhausted: ${job.attempts} of ${job.max_attempts} used`);
    return false;
  }
  const left = new Dec(job.spend_cap).minus(job.spent);
  if (left.lte(0)) {
    await finish(ctx, job, until, 'failed', `spend_cap: ${job.spent} of ${job.spend_cap} spent`);
    return false;
  }
  const terms = job.terms as JobTerms;
  const offers = await ctx.providers!.offers({
    gpuModel: terms.gpu_model,
    minFreeGpus: terms.gpu_count,
    minVramMb: terms.min_vram_mb,
    maxPrice: terms.max_price_per_gpu_hour,
    minReliability: terms.min_reliability,
    region: terms.region,
    limit: 20,
  });
  const failedOn = new Set((await attemptsOf(ctx.db, [job.id])).map((a) => a.provider_id));
  // Machines that failed the job last (a stable sort: cheapest first within each group).
  const ordered = [...offers].sort((a, b) => Number(failedOn.has(a.providerId)) - Number(failedOn.has(b.providerId)));
  let why = offers.length === 0 ? 'no offer meets its terms now' : '';
  for (const offer of ordered.slice(0, TRIES)) {
    const sessionId = randomUUID();
    try {
      await startWorkloadSession(
        ctx,
        {
          actor: PLACER,
          userId: job.user_id,
          walletId: job.wallet_id,
          providerId: offer.providerId,
          jobId: job.id,
          sessionId,
          gpuModel: offer.modelKey,
          gpuCount: terms.gpu_count,
          requestedVramMb: terms.min_vram_mb ?? 0,
          estimatedPowerW: 0,
          acceptedHourlyRate: new Dec(terms.max_price_per_gpu_hour).mul(terms.gpu_count).toFixed(),
          spendCap: left,
          workload: job.workload as never,
        },
        null,
      );
    } catch (err) {
      const code = err instanceof AppError ? err.code : '';
      if (code === 'SESSION_ALREADY_RUNNING') {
        const running = await runningSessionOfJob(ctx.db, job.id);
        if (running) return markRunning(ctx, job, until, running.id, running.provider_id);
      }
      if (NEXT_OFFER.has(code)) {
        why = `${offerText(offer)}: ${(err as Error).message}`;
        continue;
      }
      if (code === 'SPEND_CAP_TOO_LOW') {
        await finish(ctx, job, until, 'failed', `spend_cap: ${(err as Error).message}`);
        return false;
      }
      // Funds, the registry, storage: nothing another machine changes; tried again later.
      await requeue(ctx, settings, job, until, `${code || 'error'}: ${(err as Error).message}`);
      return false;
    }
    return markRunning(ctx, job, until, sessionId, offer.providerId);
  }
  await requeue(ctx, settings, job, until, why);
  return false;
}

const offerText = (o: MarketOffer) =>
  `machine ${o.providerId} (${o.freeGpus} free ${o.modelKey}, ${o.pricePerGpuHour})`;

/**
 * Records the attempt and the job running, if this placement still holds the job; a job cancelled meanwhile has its
 * new session ended at once.
 */
async function markRunning(
  ctx: BillingContext,
  job: JobRow,
  until: Date,
  sessionId: string,
  providerId: string,
): Promise<boolean> {
  const now = ctx.now();
  const kept = await ctx.db.transaction().execute(async (trx) => {
    const row = await findJob(trx, job.id, true);
    if (!row || !holds(row, until)) return false;
    const attempts = await attemptsOf(trx, [job.id]);
    if (!attempts.some((a) => a.session_id === sessionId)) {
      await insertAttempt(trx, {
        job_id: job.id,
        n: row.attempts + 1,
        session_id: sessionId,
        provider_id: providerId,
        started_at: now,
        ended_at: null,
        cost: null,
        end_reason: null,
      });
    }
    await updateJob(trx, job.id, {
      state: 'running',
      reason: null,
      session_id: sessionId,
      attempts: attempts.some((a) => a.session_id === sessionId) ? row.attempts : row.attempts + 1,
      placing_until: null,
      updated_at: now,
    });
    return true;
  });
  if (!kept) {
    const row = await findJob(ctx.db, job.id);
    if (row?.state === 'cancelled') {
      await endSession(ctx, sessionId, { status: 'completed', reason: 'job_cancelled' });
    }
  }
  return kept;
}

/** Whether this placement (the one that set `placing_until` to `until`) still holds the job. */
const holds = (row: JobRow, until: Date) => row.state === 'placing' && row.placing_until?.getTime() === until.getTime();

/** Back to the queue (or to recovering), tried again after `retry_interval`, with why it waits. */
async function requeue(ctx: BillingContext, settings: JobSettings, job: JobRow, until: Date, why: string) {
  const now = ctx.now();
  await ctx.db.transaction().execute(async (trx) => {
    const row = await findJob(trx, job.id, true);
    if (!row || !holds(row, until)) return;
    await updateJob(trx, job.id, {
      state: row.attempts > 0 ? 'recovering' : 'queued',
      reason: why.slice(0, 1000),
      placing_until: null,
      place_after: new Date(now.getTime() + durationMs(settings.retry_interval)),
      updated_at: now,
    });
  });
}

async function finish(ctx: BillingContext, job: JobRow, until: Date, state: 'failed', reason: string) {
  const now = ctx.now();
  await ctx.db.transaction().execute(async (trx) => {
    const row = await findJob(trx, job.id, true);
    if (!row || !holds(row, until)) return;
    await updateJob(trx, job.id, { state, reason, placing_until: null, ended_at: now, updated_at: now });
  });
}
