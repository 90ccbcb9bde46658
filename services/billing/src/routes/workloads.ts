/** A session's workload: its parties read it, the machine's daemon reports its states (domain/workloads/). */
import { type App, callerOf, workloadSpecSchema, zTimestamp } from '@gpu/common';
import { z } from 'zod';
import { readWorkload, reportWorkload, type Workload } from '../domain/workloads/index.ts';
import { sessionJson } from '../wire/presenters.ts';
import { SESSION_ROLES, USAGE_ROLES } from './access.ts';
import type { RouteDeps } from './deps.ts';
import { problems, schemas } from './schemas.ts';
import { sessionSchema } from './session-schemas.ts';

/** A workload spec in a request (`POST /billing/start-session`'s `workload`). */
export const workloadSpecBody = workloadSpecSchema.register(schemas, { id: 'WorkloadSpec' });

const STATES = ['pending', 'preparing', 'running', 'exited', 'failed', 'stopped'] as const;

const workloadSchema = z
  .object({
    session_id: z.uuid(),
    spec: workloadSpecBody,
    state: z.enum(STATES).describe('pending -> preparing -> running -> exited | failed | stopped'),
    exit_code: z.number().int().nullable().describe('its exit code once `exited`'),
    reason: z
      .string()
      .nullable()
      .describe(
        'why it `failed` or was `stopped`: `max_runtime`, `memory_limit`, `disk_limit`, `session_ended`, ' +
          '`not_started` (it did not run within `billing.workload_start_timeout`), ...',
      ),
    created_at: z.string(),
    preparing_at: z.string().nullable(),
    running_at: z.string().nullable().describe('when it started to run: billing starts then'),
    ended_at: z.string().nullable(),
    paid_until: z
      .string()
      .nullable()
      .optional()
      .describe(
        "until when the session's funds pay for running (its hold at the frozen rate, never past a cap's end; it " +
          'moves on as billing tops the hold up): a daemon that cannot reach billing stops the workload then; null ' +
          'once the session ended; in GET only',
      ),
    session: sessionSchema,
  })
  .describe("A session's workload, and the session as it stands")
  .register(schemas, { id: 'Workload' });

const reportBody = z
  .object({
    state: z.enum(['preparing', 'running', 'exited', 'failed', 'stopped']),
    at: zTimestamp().describe("when it happened, by the daemon's clock (billing keeps it within its own bounds)"),
    exit_code: z.number().int().min(-255).max(255).optional().describe('with `exited`'),
    reason: z
      .string()
      .min(1)
      .max(200)
      .regex(/^[a-z0-9_]+$/, 'a word such as max_runtime')
      .optional()
      .describe('with `failed` and `stopped`'),
  })
  .strict()
  .refine((b) => (b.state === 'exited') === (b.exit_code !== undefined), {
    path: ['exit_code'],
    message: 'an exit code comes with exited, and only with it',
  })
  .refine((b) => (b.state === 'failed' || b.state === 'stopped') === (b.reason !== undefined), {
    path: ['reason'],
    message: 'a reason comes with failed and stopped, and only with them',
  })
  .register(schemas, { id: 'WorkloadReport' });

const iso = (d: Date | null) => (d ? d.toISOString() : null);

const sessionParams = z.object({ sessionID: z.uuid() });

export async function workloadRoutes(app: App, deps: RouteDeps) {
  const ctx = deps.billing;
  const answer = (r: { session: Parameters<typeof sessionJson>[1]; workload: Workload; paidUntil?: Date | null }) => ({
    session_id: r.workload.sessionId,
    spec: r.workload.spec,
    state: r.workload.state,
    exit_code: r.workload.exitCode,
    reason: r.workload.reason,
    created_at: r.workload.createdAt.toISOString(),
    preparing_at: iso(r.workload.preparingAt),
    running_at: iso(r.workload.runningAt),
    ended_at: iso(r.workload.endedAt),
    ...(r.paidUntil === undefined ? {} : { paid_until: iso(r.paidUntil) }),
    session: sessionJson(ctx, r.session),
  });

  app.get(
    '/api/v1/billing/sessions/:sessionID/workload',
    {
      config: { roles: SESSION_ROLES },
      schema: {
        tags: ['sessions'],
        operationId: 'getWorkload',
        summary: "A session's workload: its spec, state and times",
        description:
          "For the parties of the session: its renter, the machine's owner and daemon (which runs it from this " +
          'spec), admins and platform services. 404 WORKLOAD_NOT_FOUND for a session that runs none.',
        params: sessionParams,
        response: { 200: workloadSchema, ...problems(400, 403, 404) },
      },
    },
    async (request) => answer(await readWorkload(ctx, callerOf(request), request.params.sessionID)),
  );

  app.post(
    '/api/v1/billing/sessions/:sessionID/workload/state',
    {
      config: { roles: USAGE_ROLES },
      schema: {
        tags: ['sessions'],
        operationId: 'reportWorkloadState',
        summary: "The machine's daemon reports a workload's state",
        description:
          "`running` starts billing (at `at`, kept within the session's start and billing's clock less " +
          '`billing.max_clock_skew`); `exited`, `failed` and `stopped` end the session at `at`, billed to its last ' +
          "started minute, with the workload's end reason (a stop after the session ended records only when it " +
          'stopped). A state already reached or passed changes nothing (200, as it stands); another end after an end ' +
          'is 409 WORKLOAD_ENDED; `preparing` or `running` for a session that has ended is 409 SESSION_NOT_ACTIVE ' +
          "(start nothing, stop what runs). Only the daemon of the session's machine (or its owner), admins and services: " +
          '403 NOT_SESSION_PROVIDER otherwise.',
        params: sessionParams,
        body: reportBody,
        response: { 200: workloadSchema, ...problems(400, 403, 404, 409) },
      },
    },
    async (request) => {
      const b = request.body;
      return answer(
        await reportWorkload(
          ctx,
          callerOf(request),
          request.params.sessionID,
          { state: b.state, at: new Date(b.at), exitCode: b.exit_code, reason: b.reason },
          request.correlationId,
        ),
      );
    },
  );
}
