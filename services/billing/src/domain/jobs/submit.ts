/**
 * A renter's side of jobs: submitting one (queued, holding nothing), reading and listing theirs, and cancelling one
 * (its running session, if any, ends at once and is billed for what ran).
 */
import { randomUUID } from 'node:crypto';
import {
  AppError,
  errors,
  isPrivileged,
  type KeysetPosition,
  lockName,
  type Page,
  type Principal,
  type WorkloadSpec,
} from '@gpu/common';
import {
  attemptsOf,
  countOpenJobs,
  findJob,
  findJobByKey,
  insertJob,
  type JobRow,
  listJobs,
  queuePositions,
  runningSessionOfJob,
  updateJob,
} from '../../db/job-repository.ts';
import type { JobState } from '../../db/schema.ts';
import { isUniqueViolation } from '../../db/unique-violation.ts';
import { billingErrors } from '../../errors.ts';
import type { BillingContext } from '../context.ts';
import { keysetPage } from '../keyset.ts';
import { Dec } from '../ledger/index.ts';
import { endSession, renterOf } from '../sessions/index.ts';
import { walletFor } from '../wallets/index.ts';
import { assertWorkloadScopes } from '../workloads/index.ts';
import { settleAttempt } from './follow.ts';
import { isEnded, type Job, type JobTerms } from './job.ts';

export interface SubmitJobInput {
  actor: Principal;
  walletId: string;
  name?: string;
  terms: JobTerms;
  workload: WorkloadSpec;
  maxAttempts: number;
  /** The most jobs the renter may have open at once (`jobs.max_open_per_renter`): this one refused past it. */
  maxOpen: number;
  retryOnFailure: boolean;
  spendCap: Dec;
  /** Seconds it may wait in the queue before it is placed (none: as long as it takes). */
  queueTimeoutSeconds?: number;
  /** Queue it even when no registered machine could ever meet its terms (one may register later). */
  waitForCapacity: boolean;
  /** The submit's `Idempotency-Key`, and the hash of the request it came with (`requestHash`). */
  idempotency?: { key: string; hash: string };
}

const jobNotFound = (id: string) => errors.notFound('JOB_NOT_FOUND', `job ${id} not found`);

/** The job with its attempts and its place in the queue. */
async function jobOf(ctx: BillingContext, rows: JobRow[]): Promise<Job[]> {
  const ids = rows.map((r) => r.id);
  const [attempts, positions] = await Promise.all([attemptsOf(ctx.db, ids), queuePositions(ctx.db, ids)]);
  return rows.map((row) => ({
    row,
    terms: row.terms as JobTerms,
    workload: row.workload as WorkloadSpec,
    attempts: attempts.filter((a) => a.job_id === row.id),
    queuePosition: positions.get(row.id) ?? null,
  }));
}

/** Queues a job for the calling renter; a submit sent again with its key answers the job it made (`replayed`). */
export async function submitJob(ctx: BillingContext, input: SubmitJobInput): Promise<{ job: Job; replayed: boolean }> {
  const userId = renterOf({ actor: input.actor });
  const { idempotency } = input;
  /** The job a key made, answered again, when the submit is the one it came with (else 409). */
  const replay = async (earlier: JobRow) => {
    if (earlier.request_hash !== null && earlier.request_hash !== idempotency?.hash) {
      throw billingErrors.idempotencyKeyReused();
    }
    return { job: (await jobOf(ctx, [earlier]))[0]!, replayed: true };
  };
  if (idempotency) {
    const earlier = await findJobByKey(ctx.db, userId, idempotency.key);
    if (earlier) return replay(earlier);
  }
  if (input.workload.idle) {
    throw errors.badRequest('IDLE_JOB', 'a job runs a program that ends: give its command or image, not idle');
  }
  // The most the job pays per GPU-hour caps its bid too: a bid above it would pay more than the renter allowed.
  const { bid_per_gpu_hour: bid, max_price_per_gpu_hour: maxPrice } = input.terms;
  if (bid !== undefined && new Dec(bid).gt(maxPrice)) {
    throw new AppError(
      'invalid',
      'BID_ABOVE_MAX_PRICE',
      `a bid of ${bid} per GPU-hour is above the job's ${maxPrice}`,
      {
        errors: [{ path: 'body.bid_per_gpu_hour', message: `above max_price_per_gpu_hour (${maxPrice})` }],
      },
    );
  }
  assertWorkloadScopes(ctx, input.actor, input.workload);
  // Its checkpoints are kept in the renter's storage: none without a storage service.
  if (input.workload.checkpoint && !ctx.storage) throw billingErrors.workloadStorageUnavailable();
  const wallet = await walletFor(ctx, input.actor, input.walletId);
  if (wallet.ownerType !== 'user' || wallet.ownerId !== userId) {
    throw errors.forbidden(`wallet ${wallet.id} is not a renter's wallet of user ${userId}`, 'NOT_WALLET_HOLDER');
  }
  if (!ctx.providers) {
    throw new AppError(
      'conflict',
      'JOBS_NEED_A_REGISTRY',
      'billing places jobs through the provider registry, and none is configured (provider_registry.url)',
    );
  }
  if (!input.waitForCapacity) await assertSomeMachineCould(ctx, input.terms);
  const now = ctx.now();
  try {
    // Counted and written under the renter's lock: submits sent at once never pass the bound together.
    const row = await ctx.db.transaction().execute(async (trx) => {
      await lockName(trx, `jobs:${userId}`);
      const open = await countOpenJobs(trx, userId);
      if (open >= input.maxOpen) throw billingErrors.tooManyOpenJobs(input.maxOpen);
      return insertJob(trx, {
        id: randomUUID(),
        user_id: userId,
        wallet_id: wallet.id,
        name: input.name ?? null,
        idempotency_key: idempotency?.key ?? null,
        request_hash: idempotency?.hash ?? null,
        terms: JSON.stringify(input.terms),
        workload: JSON.stringify(input.workload),
        max_attempts: input.maxAttempts,
        retry_on_failure: input.retryOnFailure,
        spend_cap: input.spendCap.toFixed(ctx.scale),
        state: 'queued',
        reason: 'waiting for a machine',
        session_id: null,
        place_after: now,
        placing_until: null,
        queued_until:
          input.queueTimeoutSeconds === undefined ? null : new Date(now.getTime() + input.queueTimeoutSeconds * 1000),
        created_at: now,
        updated_at: now,
        ended_at: null,
      });
    });
    // The job as submitted, read before the placer is woken: its answer never shows a placement half under way (an
    // attempt listed on a job still queued).
    const job = (await jobOf(ctx, [row]))[0]!;
    ctx.state.wakeJobs();
    return { job, replayed: false };
  } catch (err) {
    // The same key sent twice at once: the other submit made the job.
    if (idempotency && isUniqueViolation(err, 'jobs_idempotency')) {
      const earlier = await findJobByKey(ctx.db, userId, idempotency.key);
      if (earlier) return replay(earlier);
    }
    throw err;
  }
}

/**
 * Terms no registered machine could meet, whatever it runs now (nine GPUs where the largest has eight, a model no
 * machine has): 409 naming what is missing, rather than a job that waits for ever.
 */
async function assertSomeMachineCould(ctx: BillingContext, t: JobTerms): Promise<void> {
  const providers = ctx.providers!;
  const vram = t.min_vram_mb === undefined ? '' : ` with at least ${t.min_vram_mb} MB each`;
  if (await providers.anyMachineHas({ gpuModel: t.gpu_model, minGpus: t.gpu_count, minVramMb: t.min_vram_mb })) return;
  const model = t.gpu_model === undefined ? 'GPUs' : `${t.gpu_model} GPUs`;
  const why =
    t.gpu_model !== undefined && !(await providers.anyMachineHas({ gpuModel: t.gpu_model, minGpus: 1 }))
      ? `no registered machine has a GPU of model ${t.gpu_model}`
      : `no registered machine has ${t.gpu_count} ${model}${vram}`;
  throw new AppError('conflict', 'NO_MACHINE_COULD_MEET', `${why}: ask for less, or set wait_for_capacity`, {
    extra: { gpu_count: t.gpu_count, gpu_model: t.gpu_model ?? null, min_vram_mb: t.min_vram_mb ?? null },
  });
}

/** The job, for its renter (or an admin or service); 404 for anyone else, as for an unknown job. */
async function ownJob(ctx: BillingContext, actor: Principal, id: string): Promise<JobRow> {
  const row = await findJob(ctx.db, id);
  if (!row || !(isPrivileged(actor) || (actor.kind === 'user' && actor.subject === row.user_id))) throw jobNotFound(id);
  return row;
}

export async function readJob(ctx: BillingContext, actor: Principal, id: string): Promise<Job> {
  return (await jobOf(ctx, [await ownJob(ctx, actor, id)]))[0]!;
}

/** The caller's jobs (an admin's or service's: everyone's), newest first. */
export async function jobList(
  ctx: BillingContext,
  actor: Principal,
  f: { states?: JobState[]; limit: number; after?: KeysetPosition },
): Promise<Page<Job>> {
  const userId = isPrivileged(actor) ? undefined : renterOf({ actor });
  const rows = await listJobs(ctx.db, { userId, states: f.states, after: f.after, limit: f.limit + 1 });
  const page = keysetPage(rows, f.limit);
  return { items: await jobOf(ctx, page.items), nextCursor: page.nextCursor };
}

/**
 * Cancels the job: it is placed no more, and a session it runs ends now (billed for its started minutes, the rest of
 * its hold released, the cost kept with its attempt). Cancelling an ended job changes nothing but ending a session of
 * it still running, and answers it as it is.
 */
export async function cancelJob(
  ctx: BillingContext,
  actor: Principal,
  id: string,
  correlationId?: string,
): Promise<Job> {
  await ownJob(ctx, actor, id);
  await ctx.db.transaction().execute(async (trx) => {
    const row = (await findJob(trx, id, true))!;
    if (isEnded(row.state)) return;
    const now = ctx.now();
    await updateJob(trx, id, {
      state: 'cancelled',
      reason: 'cancelled by its renter',
      placing_until: null,
      ended_at: now,
      updated_at: now,
    });
  });
  // Whatever state the job was in (running, or placing with a session just started): its session ends now.
  const running = await runningSessionOfJob(ctx.db, id);
  if (running) {
    await endSession(ctx, running.id, { status: 'completed', reason: 'job_cancelled' }, correlationId);
    await settleAttempt(ctx, id, running.id, new Date(0));
  }
  return readJob(ctx, actor, id);
}
