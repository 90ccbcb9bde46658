/**
 * Jobs: `POST /api/v1/billing/jobs` (what to run and on what terms; queued, holding nothing), `GET .../jobs`,
 * `GET .../jobs/{id}` and `POST .../jobs/{id}/cancel`. Billing's placer (domain/jobs/) places, follows and recovers
 * them. Only the job's renter reads or cancels it (an admin or service may too); 404 for anyone else.
 */
import { type App, afterCursor, callerOf, pageQuery, setNextPage } from '@gpu/common';
import { z } from 'zod';
import type { BillingContext } from '../domain/context.ts';
import { cancelJob, type Job, jobList, readJob, submitJob } from '../domain/jobs/index.ts';
import { checkpointRef } from '../domain/workloads/index.ts';
import { iso, isoOrNull } from '../wire/presenters.ts';
import { RENTAL_ROLES } from './access.ts';
import { requestAmount } from './amounts.ts';
import type { RouteDeps } from './deps.ts';
import { requestHashOf } from './idempotent.ts';
import { amountString, csv, idempotencyHeaders, PAGE_DOCS, positiveAmount, problems, schemas } from './schemas.ts';
import { workloadSpecBody } from './workloads.ts';

const JOB_STATES = ['queued', 'placing', 'running', 'recovering', 'succeeded', 'failed', 'cancelled'] as const;

const termsShape = {
  gpu_count: z.number().int().min(1).max(64).describe('how many GPUs of one machine'),
  gpu_model: z
    .string()
    .max(128)
    .regex(/\S/, 'a model name, not blanks')
    .optional()
    .describe("a GPU model (`H100`: billing's model key, or the driver's name); any when absent"),
  min_vram_mb: z.number().int().min(0).max(10_000_000).optional().describe('every GPU has at least this VRAM (MB)'),
  max_price_per_gpu_hour: positiveAmount.describe('the most the job pays per GPU-hour (tokens)'),
  bid_per_gpu_hour: positiveAmount
    .optional()
    .describe(
      'interruptible at this bid per GPU-hour: each attempt rents at the bid on a machine that takes bids (cheaper; ' +
        'an on-demand rental or a higher bid takes its GPUs back with notice, and the job is placed again, from its ' +
        'last checkpoint); absent: on demand',
    ),
  on_demand_fallback: z
    .boolean()
    .optional()
    .describe('with a bid: when no machine can be had at the bid, placed on demand at up to max_price_per_gpu_hour'),
  min_reliability: z.number().min(0).max(1).optional().describe("the machine's reliability score, at least"),
  region: z
    .string()
    .max(256)
    .regex(/\S/, 'a location, not blanks')
    .optional()
    .describe("the machine's location, case-insensitive"),
};

const submitBody = z
  .object({
    name: z.string().min(1).max(128).optional().describe("a name of the renter's, shown with the job"),
    wallet_id: z.uuid().describe("the renter's wallet that pays every attempt"),
    ...termsShape,
    workload: workloadSpecBody,
    max_attempts: z
      .number()
      .int()
      .min(1)
      .max(100)
      .optional()
      .describe('sessions the job may run as in all, recoveries included (default `jobs.default_max_attempts`)'),
    retry_on_failure: z
      .boolean()
      .default(false)
      .describe('place it again when its workload fails or exits non-zero (else the job fails)'),
    spend_cap: positiveAmount.describe('the most all its attempts together may cost'),
    wait_for_capacity: z
      .boolean()
      .default(false)
      .describe('queue it even when no registered machine could ever meet its terms (else 409 NO_MACHINE_COULD_MEET)'),
    queue_timeout_seconds: z
      .number()
      .int()
      .min(1)
      .max(30 * 86_400)
      .optional()
      .describe('end the job (`failed`, queue_timeout) if no machine took it within this long; none: it waits'),
  })
  .strict()
  .describe(
    'A job to run: its terms (what a machine must offer), its workload (a command or an image, not idle) and its limits',
  )
  .register(schemas, { id: 'JobSubmit' });

const attemptSchema = z.object({
  n: z.number().int().describe('1 for the first'),
  session_id: z.uuid(),
  provider_id: z.uuid().describe('the machine it ran on'),
  started_at: z.string(),
  ended_at: z.string().nullable(),
  cost: amountString.nullable().describe('what the session cost (null while it runs)'),
  end_reason: z.string().nullable().describe("the session's end reason"),
});

const jobSchema = z
  .object({
    id: z.uuid(),
    name: z.string().nullable(),
    user_id: z.uuid(),
    wallet_id: z.uuid(),
    state: z.enum(JOB_STATES),
    reason: z
      .string()
      .nullable()
      .describe('why it waits or how it ended (`queue_timeout: ...`, `workload_exited: ...`, `attempts_exhausted`)'),
    queue_position: z.number().int().nullable().describe('its place in the queue (1: next) while queued or recovering'),
    terms: z.object(termsShape),
    workload: workloadSpecBody,
    max_attempts: z.number().int(),
    retry_on_failure: z.boolean(),
    spend_cap: amountString,
    spent: amountString.describe('what its ended attempts cost together'),
    session_id: z.uuid().nullable().describe('the session of its latest attempt'),
    attempts: z.array(attemptSchema),
    checkpoint: z
      .object({
        bucket: z.string().optional().describe("the workload's output bucket (absent: the renter's folder)"),
        key: z.string().describe("the tar of /work/checkpoint/ in the renter's storage"),
        session_id: z.uuid().describe('the attempt that kept it'),
        size: z.number().int().describe('bytes'),
        kept_at: z.string(),
      })
      .nullable()
      .describe('the checkpoint the job kept last, which its next attempt restores (null: none yet)'),
    queued_until: z.string().nullable(),
    created_at: z.string(),
    updated_at: z.string(),
    ended_at: z.string().nullable(),
  })
  .describe('A job: what a renter wants run and on what terms; billing places it on a machine')
  .register(schemas, { id: 'Job' });

const jobListSchema = z.array(jobSchema).register(schemas, { id: 'JobList' });

const jobParams = z.object({ jobID: z.uuid().describe('job ID') });

function jobJson(ctx: BillingContext, j: Job): z.output<typeof jobSchema> {
  const r = j.row;
  return {
    id: r.id,
    name: r.name,
    user_id: r.user_id,
    wallet_id: r.wallet_id,
    state: r.state,
    reason: r.reason,
    queue_position: j.queuePosition,
    terms: j.terms,
    workload: j.workload,
    max_attempts: r.max_attempts,
    retry_on_failure: r.retry_on_failure,
    spend_cap: r.spend_cap,
    spent: Number(r.spent) === 0 ? (0).toFixed(ctx.scale) : r.spent,
    session_id: r.session_id,
    attempts: j.attempts.map((a) => ({
      n: a.n,
      session_id: a.session_id,
      provider_id: a.provider_id,
      started_at: iso(a.started_at),
      ended_at: isoOrNull(a.ended_at),
      cost: a.cost,
      end_reason: a.end_reason,
    })),
    checkpoint:
      r.checkpoint_session && r.checkpoint_at
        ? {
            ...checkpointRef(j.workload, r.id, r.checkpoint_session),
            session_id: r.checkpoint_session,
            size: Number(r.checkpoint_size ?? 0),
            kept_at: iso(r.checkpoint_at),
          }
        : null,
    queued_until: isoOrNull(r.queued_until),
    created_at: iso(r.created_at),
    updated_at: iso(r.updated_at),
    ended_at: isoOrNull(r.ended_at),
  };
}

export async function jobRoutes(app: App, deps: RouteDeps) {
  const ctx = deps.billing;
  const defaultAttempts = deps.config.jobs.default_max_attempts;

  app.post(
    '/api/v1/billing/jobs',
    {
      config: {
        scope: 'sessions',
        verifiedEmail: 'sessions',
        roles: RENTAL_ROLES,
        openapi: { headers: { 201: ['Idempotent-Replayed'] } },
      },
      schema: {
        tags: ['jobs'],
        operationId: 'submitJob',
        summary:
          'Submit a job: what to run and on what terms; billing places it on the cheapest machine that meets them',
        description:
          'Queued at once, holding nothing: the placer then starts a session for it on the cheapest offer that meets ' +
          'its terms (`max_price_per_gpu_hour` is the price the renter accepts), follows it, and places it again on ' +
          'another machine when its machine fails it, while it has `max_attempts` and `spend_cap` left (the cap ' +
          'bounds all attempts together). Sent again with the same `Idempotency-Key`, the job it made is answered ' +
          '(`Idempotent-Replayed: true`); the same key with another body is 409 IDEMPOTENCY_KEY_REUSED. 400 IDLE_JOB for an idle workload, BID_ABOVE_MAX_PRICE for a ' +
          '`bid_per_gpu_hour` above `max_price_per_gpu_hour`; 403 NOT_WALLET_HOLDER for a wallet not ' +
          "the renter's; 409 NO_MACHINE_COULD_MEET when no registered machine could ever meet the terms (naming what " +
          'is missing; `wait_for_capacity` queues it all the same), JOBS_NEED_A_REGISTRY when billing runs without ' +
          'the provider registry, TOO_MANY_OPEN_JOBS when the renter has `jobs.max_open_per_renter` jobs not ended ' +
          '(1000 by default).',
        headers: idempotencyHeaders,
        body: submitBody,
        response: { 201: jobSchema, ...problems(400, 403, 404, 409, 503) },
      },
    },
    async (request, reply) => {
      const b = request.body;
      const key = request.headers['idempotency-key'];
      const { job, replayed } = await submitJob(ctx, {
        actor: callerOf(request),
        walletId: b.wallet_id,
        name: b.name,
        terms: {
          gpu_count: b.gpu_count,
          ...(b.gpu_model !== undefined ? { gpu_model: b.gpu_model } : {}),
          ...(b.min_vram_mb !== undefined ? { min_vram_mb: b.min_vram_mb } : {}),
          max_price_per_gpu_hour: requestAmount(
            b.max_price_per_gpu_hour,
            ctx.scale,
            'body.max_price_per_gpu_hour',
          ).toFixed(),
          ...(b.bid_per_gpu_hour !== undefined
            ? {
                bid_per_gpu_hour: requestAmount(b.bid_per_gpu_hour, ctx.scale, 'body.bid_per_gpu_hour').toFixed(),
              }
            : {}),
          ...(b.on_demand_fallback !== undefined ? { on_demand_fallback: b.on_demand_fallback } : {}),
          ...(b.min_reliability !== undefined ? { min_reliability: b.min_reliability } : {}),
          ...(b.region !== undefined ? { region: b.region } : {}),
        },
        workload: b.workload,
        maxAttempts: b.max_attempts ?? defaultAttempts,
        maxOpen: deps.config.jobs.max_open_per_renter,
        retryOnFailure: b.retry_on_failure,
        spendCap: requestAmount(b.spend_cap, ctx.scale, 'body.spend_cap'),
        queueTimeoutSeconds: b.queue_timeout_seconds,
        waitForCapacity: b.wait_for_capacity,
        ...(key ? { idempotency: { key, hash: requestHashOf(request) } } : {}),
      });
      if (replayed) reply.header('idempotent-replayed', 'true');
      reply.code(201);
      return jobJson(ctx, job);
    },
  );

  app.get(
    '/api/v1/billing/jobs',
    {
      config: { scope: 'sessions', roles: RENTAL_ROLES, openapi: PAGE_DOCS },
      schema: {
        tags: ['jobs'],
        operationId: 'listJobs',
        summary: "The caller's jobs, newest first (an admin's or service's: everyone's)",
        description:
          'Filter by `state` (repeat or separate with commas; `open` = queued, placing, running, recovering). Paging ' +
          'as everywhere: the next page in `X-Next-Cursor` and `Link` rel="next".',
        querystring: z.object({
          state: csv(z.enum(JOB_STATES), { open: ['queued', 'placing', 'running', 'recovering'] }).describe(
            'queued, placing, running, recovering, succeeded, failed, cancelled, or open',
          ),
          ...pageQuery,
        }),
        response: { 200: jobListSchema, ...problems(400, 403) },
      },
    },
    async (request, reply) => {
      const q = request.query;
      const page = await jobList(ctx, callerOf(request), {
        states: q.state,
        limit: q.limit,
        after: afterCursor(q.cursor),
      });
      setNextPage(request, reply, page.nextCursor);
      return page.items.map((j) => jobJson(ctx, j));
    },
  );

  app.get(
    '/api/v1/billing/jobs/:jobID',
    {
      config: { scope: 'sessions', roles: RENTAL_ROLES },
      schema: {
        tags: ['jobs'],
        operationId: 'getJob',
        summary: 'A job: its state and why, its place in the queue, and every attempt with its machine and cost',
        description: '404 JOB_NOT_FOUND for an unknown job or one of another renter.',
        params: jobParams,
        response: { 200: jobSchema, ...problems(400, 403, 404) },
      },
    },
    async (request) => jobJson(ctx, await readJob(ctx, callerOf(request), request.params.jobID)),
  );

  app.post(
    '/api/v1/billing/jobs/:jobID/cancel',
    {
      config: { scope: 'sessions', roles: RENTAL_ROLES },
      schema: {
        tags: ['jobs'],
        operationId: 'cancelJob',
        summary: 'Cancel a job: it is placed no more, and a session it runs ends now (billed for what ran)',
        description:
          'Cancelling an ended job changes nothing and answers it as it is. 404 JOB_NOT_FOUND for an unknown job or ' +
          'one of another renter.',
        params: jobParams,
        response: { 200: jobSchema, ...problems(400, 403, 404) },
      },
    },
    async (request) =>
      jobJson(ctx, await cancelJob(ctx, callerOf(request), request.params.jobID, request.correlationId)),
  );
}
