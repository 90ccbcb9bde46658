/** Usage updates from provider daemons over HTTP (the same messages also arrive over NATS). */
import { type App, callerOf, problemOf, problemSchema, statusOf, toAppError } from '@gpu/common';
import { z } from 'zod';
import {
  applyUsageUpdate,
  MAX_REPORTS_PER_BATCH as MAX_REPORTS_PER_REQUEST,
  toUsageUpdate,
  usageMessageSchema,
} from '../domain/sessions/index.ts';
import { usageResultJson } from '../wire/presenters.ts';
import { USAGE_ROLES } from './access.ts';
import type { RouteDeps } from './deps.ts';
import { idempotencyHeaders, problems, schemas } from './schemas.ts';
import { sessionSchema } from './session-schemas.ts';

export const usageRecordSchema = z
  .object({
    id: z.uuid(),
    session_id: z.uuid(),
    message_id: z.string(),
    timestamp: z.string(),
    gpu_utilization: z.number(),
    power_draw_w: z.number(),
    metrics: z.record(z.string(), z.unknown()).nullable(),
    billed_minutes: z.number().int().describe("the session's billed minutes after this update"),
    cost: z.string().describe('cost billed by this update (full minutes since the previous billing)'),
    created_at: z.string(),
  })
  .register(schemas, { id: 'UsageRecord' });

const usageAnswerSchema = z
  .object({ duplicate: z.boolean(), usage: usageRecordSchema, session: sessionSchema })
  .register(schemas, { id: 'UsageUpdateResult' });

/** A daemon's usage report, as NATS carries it too. */
const usageReportBody = usageMessageSchema.register(schemas, { id: 'UsageReport' });

const usageBatchBody = z
  .object({ reports: z.array(usageReportBody).min(1).max(MAX_REPORTS_PER_REQUEST) })
  .register(schemas, { id: 'UsageReportBatch' });

const usageBatchResultSchema = z
  .object({
    results: z.array(
      z.union([
        usageAnswerSchema.extend({ status: z.union([z.literal(200), z.literal(201)]) }),
        z.object({ status: z.number().int(), problem: problemSchema }),
      ]),
    ),
  })
  .register(schemas, { id: 'UsageBatchResult' });

export async function usageRoutes(app: App, deps: RouteDeps) {
  const ctx = deps.billing;
  app.post(
    '/api/v1/billing/usage-update',
    {
      config: { roles: USAGE_ROLES },
      schema: {
        tags: ['sessions'],
        operationId: 'reportUsage',
        summary: "Record a provider daemon's usage report and bill the session's elapsed full minutes",
        description:
          'Applied once per (session, message ID): a repeat answers 200 with the first record and `duplicate: ' +
          'true`. Elapsed time is billed by the service clock in full minutes; `actual_power_w` follows the newest ' +
          'report by timestamp, so late and out-of-order reports are safe. 400 USAGE_TIMESTAMP_OUT_OF_RANGE for a ' +
          'report dated more than `billing.max_clock_skew` (5 min) ahead of the service clock or before the session ' +
          'started (nothing is written). 409 SESSION_NOT_ACTIVE for an ended ' +
          "session. Only the daemon acting for the session provider's owner (or that owner, an admin or a service) " +
          'reports usage: 403 NOT_SESSION_PROVIDER otherwise.',
        headers: idempotencyHeaders,
        body: usageReportBody,
        response: {
          201: usageAnswerSchema,
          200: usageAnswerSchema,
          ...problems(400, 403, 404, 409),
        },
      },
    },
    async (request, reply) => {
      const key = request.headers['idempotency-key'] as string | undefined;
      const result = await applyUsageUpdate(
        ctx,
        toUsageUpdate(request.body, key, request.correlationId, callerOf(request)),
      );
      return reply.code(result.duplicate ? 200 : 201).send(usageResultJson(ctx, result));
    },
  );

  app.post(
    '/api/v1/billing/usage-updates',
    {
      config: { roles: USAGE_ROLES },
      schema: {
        tags: ['sessions'],
        operationId: 'reportUsageBatch',
        summary: 'Record several usage reports at once (a daemon with several rented GPUs)',
        description:
          `Up to ${MAX_REPORTS_PER_REQUEST} reports, each applied exactly as by POST /billing/usage-update ` +
          '(once per session and message ID; without `message_id` the timestamp names the report). The answer is ' +
          '200 with one result per report, in order: `status` 201 (applied), 200 (duplicate) or the status of its ' +
          'problem (400 USAGE_TIMESTAMP_OUT_OF_RANGE, 403 NOT_SESSION_PROVIDER, 404 SESSION_NOT_FOUND, 409 ' +
          'SESSION_NOT_ACTIVE, 500), with the usage record and session or the problem body. One refused report does ' +
          'not affect the others; a malformed one (a timestamp outside 1970 to 2100 too) makes the whole request a ' +
          '400 and none is applied.',
        body: usageBatchBody,
        response: {
          200: usageBatchResultSchema,
          ...problems(400),
        },
      },
    },
    async (request) => {
      const sender = callerOf(request);
      const settled = await Promise.allSettled(
        request.body.reports.map((m) =>
          applyUsageUpdate(ctx, toUsageUpdate(m, undefined, request.correlationId, sender)),
        ),
      );
      const results = settled.map((s) => {
        if (s.status === 'fulfilled')
          return { status: s.value.duplicate ? (200 as const) : (201 as const), ...usageResultJson(ctx, s.value) };
        const err = toAppError(s.reason);
        const status = statusOf(err);
        if (status >= 500) request.log.error({ err: s.reason }, 'usage report failed');
        return { status, problem: { ...problemOf(err), request_id: request.id } };
      });
      return { results };
    },
  );
}
