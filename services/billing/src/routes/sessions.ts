/** Rental session routes: start, end, current usage and billing history. */
import { type App, afterCursor, callerOf, pageQuery, setNextPage, withRequestLogger, zTimestamp } from '@gpu/common';
import { z } from 'zod';
import {
  BILLING_END_REASONS,
  billingHistory,
  changeBid,
  currentUsage,
  endSession,
  type SessionStart,
  sessionList,
  startSession,
} from '../domain/sessions/index.ts';
import { startWorkloadSession } from '../domain/workloads/index.ts';
import {
  billingRecordJson,
  currentUsageJson,
  sessionEndJson,
  sessionJson,
  sessionStartJson,
} from '../wire/presenters.ts';
import { RENTAL_ROLES, SESSION_ROLES } from './access.ts';
import { requestAmount } from './amounts.ts';
import type { RouteDeps } from './deps.ts';
import { keyClaim, replayable, runIdempotent } from './idempotent.ts';
import { amountString, csv, idempotencyHeaders, PAGE_DOCS, positiveAmount, problems, schemas } from './schemas.ts';
import { billingRecordSchema, pricingInputShape, sessionSchema } from './session-schemas.ts';
import { workloadSpecBody } from './workloads.ts';

const { provider_id: _priced, ...resourceShape } = pricingInputShape;

/** Session statuses (`running`: active and grace_period), repeated or comma-separated. */
const sessionStatusList = csv(z.enum(['active', 'grace_period', 'completed', 'terminated']), {
  running: ['active', 'grace_period'],
});

const csvStatus = csv(z.enum(['completed', 'terminated']));

const startSessionBody = z
  .object({
    user_id: z
      .uuid()
      .optional()
      .describe("the renter: the wallet's holder (default: the calling user; a machine client must name one)"),
    wallet_id: z.uuid(),
    provider_id: z.uuid(),
    job_id: z
      .string()
      .min(1)
      .max(200)
      .regex(/^(?!job:)/, "names starting with `job:` are the platform's jobs (POST /billing/jobs)")
      .optional()
      .describe(
        "the renter's or scheduler's job (one running session per job); default: the session's own ID. Not " +
          "`job:...`: those are the sessions of the platform's jobs",
      ),
    ...resourceShape,
    gpu_model: resourceShape.gpu_model
      .optional()
      .describe(
        'the GPU model to rent, e.g. "H100" (matched by model key); may be left out when the machine\'s GPUs are all ' +
          'of one model or a reservation names the GPUs (400 GPU_MODEL_REQUIRED otherwise)',
      ),
    reservation_id: z
      .uuid()
      .optional()
      .describe(
        "a reservation of the machine's GPUs held for this user (POST /billing/reservations): the session rents " +
          'exactly those GPUs; 404 RESERVATION_NOT_FOUND when it has expired or names another machine',
      ),
    accepted_hourly_rate: amountString
      .optional()
      .describe(
        'the highest total hourly rate the renter accepts (required of users: quote it with POST ' +
          '/pricing/calculate and the provider_id); 409 PRICE_NOT_ACCEPTED when the price is higher. It caps the ' +
          'spend per hour: the rate is frozen for the session',
      ),
    spend_cap: positiveAmount
      .optional()
      .describe(
        'the most the session may cost in all (at most the token decimals; at least its first minute at the ' +
          "session's rate, else 400 SPEND_CAP_TOO_LOW with `minimum_spend_cap`): billing ends it when the time the " +
          'cap pays for is over (`spend_cap_ends_at`), billed exactly to it (`completed`, `end_reason: ' +
          'spend_cap`), and never holds more for it',
      ),
    max_total_spend: positiveAmount
      .optional()
      .describe('the former name of `spend_cap`, still accepted (400 when both are sent)'),
    bid: positiveAmount
      .optional()
      .describe(
        'interruptible at this bid per GPU-hour, all in (the session is priced at bid × gpu_count; `rate_source: ' +
          'bid`): the machine must take bids (409 BIDS_NOT_ACCEPTED) at no less than its floor (409 ' +
          'BID_BELOW_FLOOR with `bid_floor`). The start takes free GPUs first, then those of lower bids (lowest ' +
          "first); an on-demand start or a higher bid may take this session's GPUs back: it then ends at once, " +
          '`end_reason: preempted`, billed to that moment, its workload stopped after its grace period. Absent: on ' +
          'demand, never taken back. Not with `reservation_id`',
      ),
    workload: workloadSpecBody
      .optional()
      .describe(
        "what the session runs on its GPUs (the machine's daemon runs it in a sandbox): billed only from when the " +
          'workload runs until it ends, and its end ends the session; absent: a session billed from its start, as before',
      ),
  })
  .refine((b) => b.spend_cap === undefined || b.max_total_spend === undefined, {
    path: ['max_total_spend'],
    message: 'the former name of spend_cap: send one of them',
  })
  .register(schemas, { id: 'SessionStartRequest' });

const sessionStartSchema = z
  .object({
    session: sessionSchema,
    hold_amount: z.string(),
    available_balance: z.string().describe('available after the hold'),
    estimated_runtime_minutes: z.number().int(),
  })
  .register(schemas, { id: 'SessionStart' });

const endSessionBody = z
  .object({
    session_id: z.uuid(),
    reason: z
      .string()
      .max(200)
      .refine((r) => !(BILLING_END_REASONS as readonly string[]).includes(r.trim().toLowerCase()), {
        message: `reserved: billing gives ${BILLING_END_REASONS.join(', ')} itself`,
      })
      .optional()
      .describe(
        `why the party ends it (default \`ended\`); not one billing gives itself (${BILLING_END_REASONS.join(', ')})`,
      ),
  })
  .register(schemas, { id: 'SessionEndRequest' });

const bidChangeBody = z
  .object({ bid: positiveAmount.describe('the new bid per GPU-hour (tokens)') })
  .register(schemas, { id: 'BidChangeRequest' });

const sessionEndSchema = z
  .object({ session: sessionSchema, billing_record: billingRecordSchema, already_ended: z.boolean() })
  .register(schemas, { id: 'SessionEnd' });

const currentUsageSchema = z
  .object({
    session_id: z.uuid(),
    status: z.enum(['active', 'grace_period', 'completed', 'terminated']),
    started_at: z.string(),
    elapsed_seconds: z.number().int(),
    elapsed_minutes: z.number().int().describe('started minutes: what ending now bills'),
    total_hourly_rate: z.string(),
    cost_so_far: z.string().describe('what ending now would cost (the final cost once ended)'),
    billed_minutes: z.number().int().describe('minutes billed by usage updates and the biller'),
    billed_cost: z.string(),
    hold_amount: z.string(),
    hold_remaining: z.string().describe('hold_amount - cost_so_far (never below 0)'),
    available_balance: z
      .string()
      .nullable()
      .describe("the renter's available balance: null once ended, and for the provider side"),
    estimated_remaining_minutes: z
      .number()
      .int()
      .describe('what the hold left and (for the renter) the available balance pay for, up to the spend cap'),
    actual_power_w: z.string().nullable(),
    last_usage_at: z.string().nullable(),
    grace_until: z.string().nullable(),
    spend_cap: sessionSchema.shape.spend_cap,
    spend_cap_ends_at: sessionSchema.shape.spend_cap_ends_at,
    low_balance_since: sessionSchema.shape.low_balance_since,
    end_reason: sessionSchema.shape.end_reason,
  })
  .register(schemas, { id: 'CurrentUsage' });

const sessionListSchema = z
  .array(sessionSchema)
  .describe('Sessions, newest start first; `X-Next-Cursor` names the next page')
  .register(schemas, { id: 'SessionList' });

const billingRecordListSchema = z
  .array(billingRecordSchema)
  .describe('Billing records, newest end first; `X-Next-Cursor` names the next page')
  .register(schemas, { id: 'BillingRecordList' });

/** The session's spend cap, by its name or its former one (`max_total_spend`). */
function spendCapOf(b: { spend_cap?: string; max_total_spend?: string }, scale: number) {
  if (b.spend_cap !== undefined) return requestAmount(b.spend_cap, scale, 'body.spend_cap');
  if (b.max_total_spend !== undefined) return requestAmount(b.max_total_spend, scale, 'body.max_total_spend');
  return undefined;
}

export async function sessionRoutes(app: App, deps: RouteDeps) {
  const ctx = deps.billing;

  app.post(
    '/api/v1/billing/start-session',
    {
      config: { scope: 'sessions', verifiedEmail: 'sessions', roles: RENTAL_ROLES, openapi: replayable(201) },
      schema: {
        tags: ['sessions'],
        operationId: 'startSession',
        summary: 'Start a metered GPU rental: check funds, hold the initial period, freeze the rates',
        description:
          'The renter accepts the price: `accepted_hourly_rate` (required of users) must be at least the total ' +
          'hourly rate (409 PRICE_NOT_ACCEPTED otherwise, with the current rate exactly as it must be accepted); ' +
          'the rates are then frozen, and the session starts when its GPUs are leased (`started_at`). ' +
          "The wallet must be the user's and hold at least `billing.minimum_balance` and the initial period's cost " +
          '(`billing.initial_period`, default 1 h) available; that cost is held. The provider needs a provider ' +
          'wallet (404 WALLET_NOT_FOUND otherwise) to be paid. 402 INSUFFICIENT_FUNDS changes nothing. ' +
          'estimated_runtime_minutes: whole minutes the available balance (before the hold) pays for. ' +
          '409 SESSION_ALREADY_RUNNING when the job has a running session.',
        headers: idempotencyHeaders,
        body: startSessionBody,
        response: {
          201: sessionStartSchema,
          ...problems(400, 402, 403, 404, 409, 503),
        },
      },
    },
    async (request, reply) =>
      runIdempotent(request, reply, { db: ctx.db }, async (idem) => {
        const b = request.body;
        const answer = (s: SessionStart) => ({ status: 201, body: sessionStartJson(ctx, s) });
        const asked = {
          actor: callerOf(request),
          userId: b.user_id,
          walletId: b.wallet_id,
          providerId: b.provider_id,
          jobId: b.job_id,
          reservationId: b.reservation_id,
          gpuModel: b.gpu_model,
          gpuCount: b.gpu_count,
          requestedVramMb: b.requested_vram_mb,
          estimatedPowerW: b.estimated_power_w,
          acceptedHourlyRate: b.accepted_hourly_rate,
          spendCap: spendCapOf(b, ctx.scale),
          bid: b.bid === undefined ? undefined : requestAmount(b.bid, ctx.scale, 'body.bid'),
          correlationId: request.correlationId,
        };
        const claim = keyClaim(idem, answer);
        const started = b.workload
          ? await startWorkloadSession(ctx, { ...asked, workload: b.workload }, claim)
          : await startSession(ctx, asked, claim);
        return answer(started);
      }),
  );

  app.post(
    '/api/v1/billing/end-session',
    {
      config: { scope: 'sessions', roles: SESSION_ROLES },
      schema: {
        tags: ['sessions'],
        operationId: 'endSession',
        summary: 'End a rental: bill it per minute (started minutes count), pay provider and fee, release the rest',
        description: 'Ending an ended session answers its existing billing record (200, `already_ended: true`).',
        body: endSessionBody,
        response: {
          200: sessionEndSchema,
          ...problems(400, 403, 404),
        },
      },
    },
    async (request) =>
      sessionEndJson(
        ctx,
        await endSession(
          withRequestLogger(ctx, request),
          request.body.session_id,
          { status: 'completed', reason: request.body.reason ?? 'ended' },
          request.correlationId,
          callerOf(request),
        ),
      ),
  );

  app.post(
    '/api/v1/billing/sessions/:sessionID/bid',
    {
      config: { scope: 'sessions', roles: RENTAL_ROLES },
      schema: {
        tags: ['sessions'],
        operationId: 'changeSessionBid',
        summary: "Change a running interruptible session's bid per GPU-hour (its renter)",
        description:
          'The session holds its GPUs at the new bid at once (a start must outbid it to take them); each minute is ' +
          'billed at the highest rate in force during it, so a raise prices the minute in progress and a cut takes ' +
          'effect at the next minute (`rate_segments`). Setting the bid in force again changes nothing. ' +
          '409 SESSION_NOT_INTERRUPTIBLE (on demand), SESSION_NOT_ACTIVE (ended: a preemption ends billing at ' +
          "once, so no raise can undo one), BIDS_NOT_ACCEPTED, BID_BELOW_FLOOR, BID_ABOVE_CAP (a job's " +
          '`max_price_per_gpu_hour`, or a spend cap that would not pay the next minute at the new bid), ' +
          'TOO_MANY_BID_CHANGES (changed in 1,000 of its minutes already), BID_NOT_ABOVE_OUTBID (a session that ' +
          'took GPUs from bids keeps its bid above the highest of them: `outbid` in the problem); 402 ' +
          'INSUFFICIENT_FUNDS when hold and wallet do not cover the next billing interval at a raised bid.',
        params: z.object({ sessionID: z.uuid() }),
        body: bidChangeBody,
        response: {
          200: sessionSchema,
          ...problems(400, 402, 403, 404, 409),
        },
      },
    },
    async (request) =>
      sessionJson(
        ctx,
        await changeBid(withRequestLogger(ctx, request), {
          actor: callerOf(request),
          sessionId: request.params.sessionID,
          bid: requestAmount(request.body.bid, ctx.scale, 'body.bid'),
          correlationId: request.correlationId,
        }),
      ),
  );

  app.get(
    '/api/v1/billing/current-usage/:sessionID',
    {
      config: { scope: 'sessions', roles: SESSION_ROLES },
      schema: {
        tags: ['sessions'],
        operationId: 'getCurrentUsage',
        summary: 'Usage of a session so far: elapsed minutes, cost so far, hold left, estimated remaining runtime',
        params: z.object({ sessionID: z.uuid() }),
        response: {
          200: currentUsageSchema,
          ...problems(400, 403, 404),
        },
      },
    },
    async (request) => currentUsageJson(ctx, await currentUsage(ctx, callerOf(request), request.params.sessionID)),
  );

  app.get(
    '/api/v1/billing/sessions',
    {
      config: { scope: 'sessions', roles: SESSION_ROLES, openapi: PAGE_DOCS },
      schema: {
        tags: ['sessions'],
        operationId: 'listSessions',
        summary: 'Rental sessions, newest start first: a daemon finds the running sessions on its machine here',
        description:
          'A user (or their daemon) sees the sessions they rent or that run on machines they own; admins and ' +
          'services see all. Filters: `provider_id` (the registry machine ID), `user_id`, `status` (repeat or ' +
          'separate with commas; `running` = active and grace_period). Paging as everywhere: a JSON array, the ' +
          'next page in `X-Next-Cursor` and `Link` rel="next".',
        querystring: z.object({
          provider_id: z.uuid().optional(),
          user_id: z.uuid().optional(),
          status: sessionStatusList.describe('active, grace_period, completed, terminated, or running'),
          ...pageQuery,
        }),
        response: {
          200: sessionListSchema,
          ...problems(400, 403),
        },
      },
    },
    async (request, reply) => {
      const q = request.query;
      const page = await sessionList(ctx.db, callerOf(request), {
        limit: q.limit,
        after: afterCursor(q.cursor),
        providerId: q.provider_id,
        userId: q.user_id,
        status: q.status,
      });
      setNextPage(request, reply, page.nextCursor);
      return page.items.map((s) => sessionJson(ctx, s));
    },
  );

  app.get(
    '/api/v1/billing/history',
    {
      config: { scope: 'sessions', roles: SESSION_ROLES, openapi: PAGE_DOCS },
      schema: {
        tags: ['sessions'],
        operationId: 'listBillingHistory',
        summary: 'Billing records of ended sessions, newest first, with filters and cursor pagination',
        description:
          'When more records follow, the answer carries `X-Next-Cursor` and a `Link` to the next page ' +
          '(rel="next"); pass it back as `cursor`. 400 INVALID_CURSOR for a cursor not from this list.',
        querystring: z.object({
          user_id: z.uuid().optional(),
          provider_id: z.uuid().optional(),
          wallet_id: z.uuid().optional(),
          status: csvStatus.describe('completed and/or terminated (repeat or separate with commas)'),
          from: zTimestamp().optional().describe('ended at or after (RFC 3339, 1970 to 2100)'),
          to: zTimestamp().optional().describe('ended before (RFC 3339, 1970 to 2100)'),
          ...pageQuery,
        }),
        response: {
          200: billingRecordListSchema,
          ...problems(400, 403),
        },
      },
    },
    async (request, reply) => {
      const q = request.query;
      const page = await billingHistory(ctx.db, callerOf(request), {
        limit: q.limit,
        after: afterCursor(q.cursor),
        userId: q.user_id,
        providerId: q.provider_id,
        walletId: q.wallet_id,
        status: q.status,
        from: q.from ? new Date(q.from) : undefined,
        to: q.to ? new Date(q.to) : undefined,
      });
      setNextPage(request, reply, page.nextCursor);
      return page.items.map((r) => billingRecordJson(r, ctx.scale));
    },
  );
}
