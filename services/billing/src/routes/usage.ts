/** Usage updates from provider daemons over HTTP (the same messages also arrive over NATS). */
import type { App } from '@gpu/common';
import { z } from 'zod';
import { applyUsageUpdate } from '../domain/usage-updates.ts';
import type { RouteDeps } from './deps.ts';
import { idempotencyHeaders, problems } from './schemas.ts';
import { sessionSchema } from './session-schemas.ts';

/** Whether a JSON value has a NUL character in any key or string (PostgreSQL's jsonb can't store one). */
function hasNul(value: unknown): boolean {
  if (typeof value === 'string') return value.includes('\0');
  if (Array.isArray(value)) return value.some(hasNul);
  if (value && typeof value === 'object') {
    return Object.entries(value).some(([k, v]) => k.includes('\0') || hasNul(v));
  }
  return false;
}

/** The usage message (HTTP body and NATS payload on `billing.usage.<session_id>`). */
export const usageMessageSchema = z.object({
  session_id: z.uuid(),
  timestamp: z.iso.datetime({ offset: true }).describe('when the daemon measured (RFC 3339)'),
  gpu_utilization: z.number().min(0).max(100).describe('percent'),
  power_draw_w: z.number().min(0).max(100_000),
  metrics: z
    .record(z.string(), z.unknown())
    .refine((m) => !hasNul(m), 'metrics may not contain NUL characters')
    .optional()
    .describe('free-form extra metrics, stored as given (no NUL characters: PostgreSQL jsonb refuses them)'),
  message_id: z
    .string()
    .min(1)
    .max(255)
    .optional()
    .describe('de-duplication key; else the Idempotency-Key header (HTTP) or Nats-Msg-Id (NATS), else the timestamp'),
});

export const usageRecordSchema = z.object({
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
});

export async function usageRoutes(app: App, deps: RouteDeps) {
  const ctx = deps.billing;
  app.post(
    '/api/v1/billing/usage-update',
    {
      // The hottest route (every daemon, every interval): the answer is built by typed code from validated rows,
      // so it is written with plain JSON.stringify instead of being checked against the response schema again
      // (the schema still documents it in OpenAPI, and the tests check answers against it).
      serializerCompiler: () => (data) => JSON.stringify(data),
      schema: {
        tags: ['sessions'],
        summary: "Record a provider daemon's usage report and bill the session's elapsed full minutes",
        description:
          'Applied once per (session, message ID): a repeat answers 200 with the first record and `duplicate: ' +
          'true`. Elapsed time is billed by the service clock in full minutes; `actual_power_w` follows the newest ' +
          'report by timestamp, so late and out-of-order reports are safe. 409 SESSION_NOT_ACTIVE for an ended ' +
          'session.',
        headers: idempotencyHeaders,
        body: usageMessageSchema,
        response: {
          201: z.object({ duplicate: z.boolean(), usage: usageRecordSchema, session: sessionSchema }),
          200: z.object({ duplicate: z.boolean(), usage: usageRecordSchema, session: sessionSchema }),
          ...problems(400, 404, 409),
        },
      },
    },
    async (request, reply) => {
      const b = request.body;
      const key = request.headers['idempotency-key'] as string | undefined;
      const timestamp = new Date(b.timestamp);
      const result = await applyUsageUpdate(ctx, {
        sessionId: b.session_id,
        messageId: b.message_id ?? key ?? `ts:${timestamp.toISOString()}`,
        timestamp,
        gpuUtilization: b.gpu_utilization,
        powerDrawW: b.power_draw_w,
        metrics: b.metrics,
        correlationId: request.correlationId,
      });
      return reply.code(result.duplicate ? 200 : 201).send(result);
    },
  );
}
