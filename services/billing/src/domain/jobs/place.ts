/**
 * The placer: billing's scheduler of jobs, a round every `jobs.place_interval` on each instance (and at once when
 * woken: a job submitted, a session ended, a machine's status changed, a queued job's queue timeout due). Its state
 * is the jobs table, so a placer killed at any moment loses nothing and places nothing twice:
 *
 * - **Claim:** queued and recovering jobs that are due, `FOR UPDATE SKIP LOCKED` (two instances never take one job),
 *   marked `placing` until `placing_until` and committed; a placement whose placer died is taken over after that. A
 *   job no offer fitted is due again a `retry_interval` later, or as soon as capacity may have appeared (a session
 *   ended, a machine's status changed); a queued job past its queue timeout is due at once, and ends so.
 * - **Place:** the market's offers that meet the job's terms, cheapest first, machines that failed the job last,
 *   `PARALLEL` jobs at once. The market (the registry's mirror of billing's leases) may lag a start by a message, so
 *   a round keeps what it learned of each machine itself ({@link RoundCapacity}): the GPUs its own starts took are
 *   not offered again within the round, nor more than a machine had when it refused a start for want of GPUs. A round that claimed
 *   a full batch and placed some runs again at once: a backlog drains at the placer's pace, not a batch a
 *   `place_interval`. For each offer, the attempt is written first (under the job's lock, while this placement still
 *   holds it), then the session is started: its `job_id` is `job:<the job's ID>`, so at most one session of a job
 *   runs (the database's unique index) and no renter's own session can pass for one. The renter's price limit is the
 *   session's accepted rate, and what is left of the job's spend cap the session's cap, so no attempt can spend past
 *   the job's; a job whose cap has too little left to pay any offer's first minute ends (`spend_cap`). A start refused takes its attempt back; a start that succeeded after this placement lost the job is
 *   the follower's to settle (follow.ts): it adopts the session, or ends it.
 */
import { randomUUID } from 'node:crypto';
import { AppError, durationMs, forEachLimited, type Principal } from '@gpu/common';
import type { Transaction } from 'kysely';
import {
  addAttempt,
  attemptsOf,
  claimJobsToPlace,
  dropAttempt,
  findAttempt,
  findJob,
  type JobRow,
  nextQueueTimeout,
  runJobSession,
  runningSessionOfJob,
  sessionJobId,
  updateJob,
} from '../../db/job-repository.ts';
import type { BillingDB } from '../../db/schema.ts';
import type { BillingContext } from '../context.ts';
import { Dec } from '../ledger/index.ts';
import type { MarketOffer } from '../provider-directory.ts';
import { startWorkloadSession } from '../workloads/index.ts';
import { settleAttempt } from './follow.ts';
import type { JobSettings, JobTerms } from './job.ts';

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
/** Jobs of one round placed at once. */
const PARALLEL = 4;
/** How long a job whose wallet cannot pay waits before it is tried again (its renter may add funds). */
const FUNDS_RETRY_MS = 30_000;

/** The error of a start whose spend cap (what is left of the job's) pays less than the machine's first minute. */
const CAP_SHORT = 'SPEND_CAP_TOO_LOW';

/** The error of a start that means "this machine has not that many GPUs free now" (for the rest of the round). */
const NO_GPUS = 'PROVIDER_NOT_AVAILABLE';

/** Errors of a start that mean "not this machine": the next offer is tried. */
const NEXT_OFFER = new Set([
  'PRICE_NOT_ACCEPTED',
  'BIDS_NOT_ACCEPTED',
  'BID_BELOW_FLOOR',
  'PROVIDER_NOT_AVAILABLE',
  'PROVIDER_NOT_FOUND',
  'GPU_GROUP_TOO_SMALL',
  'GPU_MODEL_REQUIRED',
  'GPU_MODEL_NOT_ON_MACHINE',
  'WALLET_NOT_FOUND',
]);

/**
 * Places the jobs that are due; how many were placed. `capacity`: GPUs may have come free (a session ended, a
 * machine's status changed), so the jobs waiting out their `retry_interval` are tried now too: a job is placed when
 * its capacity appears, not a retry later.
 */
export async function placeJobs(
  ctx: BillingContext,
  settings: JobSettings,
  opts: { capacity?: boolean } = {},
): Promise<number> {
  const now = ctx.now();
  const until = new Date(now.getTime() + durationMs(settings.placing_timeout));
  const claimed = await ctx.db.transaction().execute(async (trx) => {
    const jobs = await claimJobsToPlace(trx, now, CLAIM, opts.capacity);
    for (const job of jobs) await updateJob(trx, job.id, { state: 'placing', placing_until: until, updated_at: now });
    return jobs.map((j) => ({ ...j, state: 'placing' as const, placing_until: until }));
  });
  const capacity = new RoundCapacity();
  let placed = 0;
  await forEachLimited(claimed, PARALLEL, async (job) => {
    try {
      if (await placeJob(ctx, settings, job, until, capacity)) placed += 1;
    } catch (err) {
      ctx.logger.warn({ err, job_id: job.id }, 'placing a job failed; it is tried again');
      await requeue(ctx, job.id, until, `placing failed: ${(err as Error).message}`, settings.retry_interval).catch(
        () => {},
      );
    }
  });
  // A backlog: the next batch now, not a `place_interval` later.
  if (claimed.length === CLAIM && placed > 0) ctx.state.wakeJobs();
  return placed;
}

/** When the next queued job's queue timeout falls (null: no queued job has one): a round then ends it. */
export function nextQueueDeadline(ctx: BillingContext): Promise<Date | null> {
  return nextQueueTimeout(ctx.db, ctx.now());
}

/**
 * What one round learned of machines' free GPUs beyond the market's answer, which may not show the round's own
 * starts yet; per machine and GPU model, as the market offers them. A machine's free GPUs of a model are the fewest it
 * was offered with this round, less what this round's starts hold or took there; a start it refused for want of GPUs
 * says it has fewer than that start asked for.
 */
export class RoundCapacity {
  private readonly free = new Map<string, number>();

  /** Takes `count` of the offer's GPUs for a start, if the round knows of that many free. */
  take(offer: Offered, count: number): boolean {
    const key = keyOf(offer);
    const known = Math.min(offer.freeGpus, this.free.get(key) ?? offer.freeGpus);
    if (known < count) return false;
    this.free.set(key, known - count);
    return true;
  }

  /** A start that did not happen gives its GPUs back. */
  giveBack(offer: Offered, count: number): void {
    const key = keyOf(offer);
    this.free.set(key, (this.free.get(key) ?? 0) + count);
  }

  /** The machine refused a start of `count` for want of GPUs: it has fewer than that free. */
  refused(offer: Offered, count: number): void {
    const key = keyOf(offer);
    this.free.set(key, Math.min((this.free.get(key) ?? 0) + count, count - 1));
  }
}

type Offered = Pick<MarketOffer, 'providerId' | 'modelKey' | 'freeGpus'>;
const keyOf = (offer: Offered) => `${offer.providerId}/${offer.modelKey}`;

/** Whether the job now runs. */
async function placeJob(
  ctx: BillingContext,
  settings: JobSettings,
  claimed: JobRow,
  until: Date,
  capacity: RoundCapacity,
): Promise<boolean> {
  const now = ctx.now();
  let job = claimed;
  // Its earlier placer started a session and died (or lost the job) before following it: that session is the attempt.
  const running = await runningSessionOfJob(ctx.db, job.id);
  if (running) return markRunning(ctx, job.id, until, running.id);
  // An earlier attempt's session that ended before anyone followed it decides the job first (follow.ts): the job is
  // placed again only if its end says so, and with what it cost counted against the job's cap.
  const settled = await settleEarlierAttempts(ctx, settings, job, until);
  if (!settled) return false;
  job = settled;
  // The queue timeout is a first placement's: a job recovering from a lost machine is placed again however long.
  if (job.attempts === 0 && job.queued_until && now >= job.queued_until) {
    await finish(ctx, job.id, until, 'queue_timeout: no machine met its terms before its queue timeout');
    return false;
  }
  if (job.attempts >= job.max_attempts) {
    await finish(ctx, job.id, until, `attempts_exhausted: ${job.attempts} of ${job.max_attempts} used`);
    return false;
  }
  const left = new Dec(job.spend_cap).minus(job.spent);
  if (left.lte(0)) {
    await finish(ctx, job.id, until, `spend_cap: ${job.spent} of ${job.spend_cap} spent`);
    return false;
  }
  const terms = job.terms as JobTerms;
  const offers = await candidates(ctx, terms).catch(async (err: unknown) => {
    // Terms the registry's market refuses to search: waiting mends nothing.
    if (err instanceof AppError && err.kind === 'invalid') {
      await finish(ctx, job.id, until, `${err.code}: ${err.message}`);
      return null;
    }
    throw err;
  });
  if (offers === null) return false;
  const failedOn = new Set((await attemptsOf(ctx.db, [job.id])).map((a) => a.provider_id));
  // Machines that failed the job last (a stable sort: in the candidates' order within each group).
  const ordered = [...offers].sort(
    (a, b) => Number(failedOn.has(a.offer.providerId)) - Number(failedOn.has(b.offer.providerId)),
  );
  let why = offers.length === 0 ? 'no offer meets its terms now' : '';
  let tried = 0;
  let skipped = 0;
  /** Offers whose first minute costs more than what is left of the job's spend cap. */
  let capShort = 0;
  for (const { offer, bid } of ordered) {
    if (tried === TRIES) break;
    if (!capacity.take(offer, terms.gpu_count)) {
      skipped += 1;
      why ||= `the machines offered were taken by other jobs' placements (${offerText(offer)})`;
      continue;
    }
    tried += 1;
    const sessionId = randomUUID();
    if (!(await beginAttempt(ctx, job.id, until, sessionId, offer.providerId))) {
      capacity.giveBack(offer, terms.gpu_count);
      return false;
    }
    try {
      await startWorkloadSession(
        ctx,
        {
          actor: PLACER,
          userId: job.user_id,
          walletId: job.wallet_id,
          providerId: offer.providerId,
          jobId: sessionJobId(job.id),
          sessionId,
          gpuModel: offer.modelKey,
          gpuCount: terms.gpu_count,
          requestedVramMb: terms.min_vram_mb ?? 0,
          estimatedPowerW: 0,
          acceptedHourlyRate: new Dec(bid ?? terms.max_price_per_gpu_hour).mul(terms.gpu_count).toFixed(),
          ...(bid ? { bid: new Dec(bid) } : {}),
          spendCap: left,
          workload: job.workload as never,
          // In the start's own transaction, first: the session is written only while this placement holds the job
          // and its attempt is open (a follower that gave the attempt up, a cancel, another placer: nothing starts).
          guard: (trx) => holdsForStart(trx, job.id, until, sessionId, ctx.now()),
        },
        null,
      );
    } catch (err) {
      // Nothing was started (the start's transaction rolled back): the attempt is taken back, and the GPUs. Unless
      // its commit went through though its answer was lost (a connection cut): it started. Asked under the job's lock,
      // which the start held to its commit, so a commit still under way is waited for, not taken for none.
      const dropped = await ctx.db.transaction().execute((trx) => dropAttempt(trx, job.id, sessionId));
      if (!dropped) return markRunning(ctx, job.id, until, sessionId);
      const code = err instanceof AppError ? err.code : '';
      if (code === NO_GPUS) capacity.refused(offer, terms.gpu_count);
      else capacity.giveBack(offer, terms.gpu_count);
      if (err instanceof PlacementLost) return false;
      if (code === 'SESSION_ALREADY_RUNNING') {
        const other = await runningSessionOfJob(ctx.db, job.id);
        if (other) return markRunning(ctx, job.id, until, other.id);
      }
      if (NEXT_OFFER.has(code) || code === CAP_SHORT) {
        if (code === CAP_SHORT) capShort += 1;
        why = `${offerText(offer)}: ${(err as Error).message}`;
        continue;
      }
      const detail = `${code || 'error'}: ${(err as Error).message}`;
      if (code === 'INSUFFICIENT_FUNDS') {
        await requeue(ctx, job.id, until, detail, FUNDS_RETRY_MS);
      } else if (err instanceof AppError && ['invalid', 'forbidden', 'not_found'].includes(err.kind)) {
        // What no machine changes and waiting does not mend (an input not the renter's).
        await finish(ctx, job.id, until, detail);
      } else {
        // The registry or storage unreachable: tried again.
        await requeue(ctx, job.id, until, detail, settings.retry_interval);
      }
      return false;
    }
    return markRunning(ctx, job.id, until, sessionId);
  }
  // The spend cap bounds all its attempts together: what is left of it pays no machine's first minute (the cheapest
  // offers were tried first), so no attempt can ever start.
  if (capShort > 0 && capShort === tried && skipped === 0) {
    await finish(
      ctx,
      job.id,
      until,
      `spend_cap: ${job.spent} of ${job.spend_cap} spent; what is left pays for less than a first minute on any ` +
        `machine that meets its terms (${left.toFixed()} left; ${why})`,
    );
    return false;
  }
  await requeue(ctx, job.id, until, why, settings.retry_interval);
  return false;
}

const offerText = (o: MarketOffer) =>
  `machine ${o.providerId} (${o.freeGpus} free ${o.modelKey}, ${o.pricePerGpuHour})`;

/** An offer to try, and the bid to start at there (absent: on demand). */
interface Candidate {
  offer: MarketOffer;
  bid?: string;
}

/**
 * The offers to try for the job, in order. On demand: the market's offers with enough free GPUs at its price, cheapest
 * first. At a bid: the groups of machines that take it (their floor at most the bid) where it could get the GPUs, free
 * ones first (nothing taken back), then those whose lowest held bid is lowest; each offered with the GPUs a bid could
 * get there (what the round counts). With `on_demand_fallback`, the on-demand offers follow.
 */
async function candidates(ctx: BillingContext, terms: JobTerms): Promise<Candidate[]> {
  const common = {
    gpuModel: terms.gpu_model,
    minVramMb: terms.min_vram_mb,
    minReliability: terms.min_reliability,
    region: terms.region,
  };
  const onDemand = async () =>
    (
      await ctx.providers!.offers({
        ...common,
        minFreeGpus: terms.gpu_count,
        maxPrice: terms.max_price_per_gpu_hour,
        limit: 20,
      })
    ).map((offer): Candidate => ({ offer }));
  const bid = terms.bid_per_gpu_hour;
  if (bid === undefined) return onDemand();
  // Only machines whose floor the bid meets (among many that take no bids, a page of the market by price alone could
  // hold none of them): a page of those with the GPUs free, then a page of every group, where GPUs held at lower bids
  // count too (and which groups that no bid could win may fill).
  const [freeGroups, anyGroups] = await Promise.all([
    ctx.providers!.offers({ ...common, minFreeGpus: terms.gpu_count, maxBid: bid, limit: 50 }),
    ctx.providers!.offers({ ...common, minGpus: terms.gpu_count, availability: 'any', maxBid: bid, limit: 50 }),
  ]);
  const seen = new Set<string>();
  const atBid = [...freeGroups, ...anyGroups]
    .filter((o) => {
      const key = `${o.providerId}/${o.modelKey}`;
      if (seen.has(key)) return false;
      seen.add(key);
      return true;
    })
    .flatMap((o) => {
      const i = o.interruptible;
      if (!i || new Dec(i.bidFloor).gt(bid) || i.gpus < terms.gpu_count) return [];
      const free = o.freeGpus >= terms.gpu_count;
      if (!free && !(i.outbidAbove !== null && new Dec(bid).gt(i.outbidAbove))) return [];
      return [{ offer: { ...o, freeGpus: i.gpus }, bid, free, above: new Dec(i.outbidAbove ?? 0) }];
    });
  atBid.sort((a, b) => Number(b.free) - Number(a.free) || a.above.comparedTo(b.above));
  const tried = atBid.map(({ offer }): Candidate => ({ offer, bid }));
  return terms.on_demand_fallback ? [...tried, ...(await onDemand())] : tried;
}

/**
 * Settles the job's attempts not settled yet (follow.ts `settleAttempt`); the job as it is then, or null when this
 * placement no longer holds it (an attempt's end decided it).
 */
async function settleEarlierAttempts(
  ctx: BillingContext,
  settings: JobSettings,
  job: JobRow,
  until: Date,
): Promise<JobRow | null> {
  const open = (await attemptsOf(ctx.db, [job.id])).filter((a) => a.ended_at === null);
  if (open.length === 0) return job;
  const stale = new Date(ctx.now().getTime() - durationMs(settings.placing_timeout));
  for (const a of open) await settleAttempt(ctx, job.id, a.session_id, stale, settings.final_checkpoint_wait);
  const row = await findJob(ctx.db, job.id);
  return holds(row, until) ? row : null;
}

/** Whether this placement (the one that set `placing_until` to `until`) still holds the job. */
const holds = (row: JobRow | undefined, until: Date): row is JobRow =>
  row?.state === 'placing' && row.placing_until?.getTime() === until.getTime();

/** This placement no longer holds the job, or its attempt was given up: the session is not started. */
class PlacementLost extends Error {}

/**
 * The start's guard: the job locked (the follower and cancel lock it first too), held by this placement within its
 * time, and the attempt still open.
 */
async function holdsForStart(
  trx: Transaction<BillingDB>,
  jobId: string,
  until: Date,
  sessionId: string,
  now: Date,
): Promise<void> {
  const row = await findJob(trx, jobId, true);
  if (!holds(row, until) || until <= now) throw new PlacementLost(`the placement of job ${jobId} lost the job`);
  const attempt = await findAttempt(trx, sessionId);
  if (!attempt || attempt.ended_at) throw new PlacementLost(`the attempt of session ${sessionId} was given up`);
}

/** Writes the attempt about to be started, if this placement still holds the job. */
async function beginAttempt(
  ctx: BillingContext,
  jobId: string,
  until: Date,
  sessionId: string,
  providerId: string,
): Promise<boolean> {
  return ctx.db.transaction().execute(async (trx) => {
    if (!holds(await findJob(trx, jobId, true), until)) return false;
    await addAttempt(trx, { job_id: jobId, session_id: sessionId, provider_id: providerId, started_at: ctx.now() });
    return true;
  });
}

/**
 * The job runs its session, if this placement still holds the job; else the follower settles the session (adopts it
 * for a job waiting to be placed, ends it for one that ended meanwhile).
 */
async function markRunning(ctx: BillingContext, jobId: string, until: Date, sessionId: string): Promise<boolean> {
  const now = ctx.now();
  const kept = await ctx.db.transaction().execute(async (trx) => {
    if (!holds(await findJob(trx, jobId, true), until)) return false;
    await runJobSession(trx, jobId, sessionId, now);
    return true;
  });
  if (!kept) ctx.state.wakeJobs();
  return kept;
}

/** Back to the queue (or to recovering), tried again after `retryIn`, with why it waits. */
async function requeue(ctx: BillingContext, jobId: string, until: Date, why: string, retryIn: string | number) {
  const now = ctx.now();
  const wait = typeof retryIn === 'number' ? retryIn : durationMs(retryIn);
  await ctx.db.transaction().execute(async (trx) => {
    const row = await findJob(trx, jobId, true);
    if (!holds(row, until)) return;
    await updateJob(trx, jobId, {
      state: row.attempts > 0 ? 'recovering' : 'queued',
      reason: why.slice(0, 1000),
      placing_until: null,
      place_after: new Date(now.getTime() + wait),
      updated_at: now,
    });
  });
}

async function finish(ctx: BillingContext, jobId: string, until: Date, reason: string) {
  const now = ctx.now();
  await ctx.db.transaction().execute(async (trx) => {
    if (!holds(await findJob(trx, jobId, true), until)) return;
    await updateJob(trx, jobId, {
      state: 'failed',
      reason: reason.slice(0, 1000),
      placing_until: null,
      ended_at: now,
      updated_at: now,
    });
  });
}
