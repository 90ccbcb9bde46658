/**
 * Rental sessions on a provider, reported by billing when it runs without NATS (with NATS the same reports arrive as
 * billing's session events: adapters/billing-events-consumer.ts). `PUT` says a session runs on the provider, holding
 * the GPUs its optional body names (none: every GPU), `DELETE` that it ended; both are idempotent and apply the
 * busy/idle rule of `domain/provider-sessions.ts`. The routes live in a plugin of their own, so that their lenient
 * JSON parser (an empty body is no body) touches no other route.
 */
import { type App, callerOf, problemSchema } from '@gpu/common';
import type { FastifyPluginAsync } from 'fastify';
import { z } from 'zod';
import { SESSION_REPORTING_ROLES } from '../domain/access.ts';
import type { ProviderSessions, SessionReport } from '../domain/provider-sessions.ts';
import { registryErrors } from '../errors.ts';
import { leaseKindSchema, sessionRunningSchema, toGpuSet } from '../wire/sessions.ts';
import { parseOptionalJson } from './optional-json.ts';
import { schemas, statusSchema } from './schemas.ts';

export interface SessionRoutesOptions {
  sessions: ProviderSessions;
}

const tags = ['sessions'];
const errorsOf = (...codes: number[]) => Object.fromEntries(codes.map((c) => [c, problemSchema]));

const sessionParams = z.object({
  providerID: z.uuid().describe('provider UUID'),
  sessionID: z.uuid().describe("billing's session UUID"),
});

const sessionReportSchema = z
  .object({
    message: z.string(),
    provider_id: z.uuid(),
    session_id: z.uuid(),
    active: z.boolean().describe('whether the session counts as running on the provider'),
    kind: leaseKindSchema,
    gpu_indices: z
      .array(z.number().int())
      .nullable()
      .describe('the GPUs the session holds, by index in index order; null: every GPU of the machine'),
    previous_status: statusSchema,
    status: statusSchema,
  })
  .describe("A rental session as the registry holds it, and the provider's status before and after the report")
  .register(schemas, { id: 'SessionReport' });

const endQuery = z.object({
  end_reason: z
    .string()
    .min(1)
    .max(200)
    .optional()
    .describe(
      "billing's end reason; a fault of the machine's (`provider_offline`, `provider_error`, `provider_maintenance`, " +
        '`provider_removed`, `provider_ended`, `workload_not_started`, `workload_lost`) counts against its reliability, ' +
        'once per session',
    ),
  renter_id: z
    .uuid()
    .optional()
    .describe("the session's renter: a rental by the machine's own owner is not counted in its reliability"),
  kind: leaseKindSchema.optional(),
});

const answer = (message: string, r: SessionReport) => ({
  message,
  ...r,
  gpu_indices: r.gpu_indices && [...r.gpu_indices],
});

/** A running session's body, named in the document. */
const sessionRunningBody = sessionRunningSchema.register(schemas, { id: 'SessionRunningRequest' });

export const sessionRoutes: FastifyPluginAsync<SessionRoutesOptions> = async (fastify, opts) => {
  const app = fastify as unknown as App;
  const { sessions } = opts;
  const config = { roles: SESSION_REPORTING_ROLES };
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, parseOptionalJson);

  app.put(
    '/providers/:providerID/sessions/:sessionID',
    {
      config,
      schema: {
        tags,
        operationId: 'reportSessionRunning',
        summary: 'Report a rental session running on the provider (billing, without NATS)',
        description:
          "Idempotent. The session holds the GPUs `gpu_indices` names (their positions in the provider's `gpus` " +
          'array); no body, `{}` or `gpu_indices: null` hold every GPU of the machine, and a later report that names ' +
          "GPUs restates them. `kind: reservation` with `expires_at` reports a reservation of billing's scheduler: " +
          'it holds its GPUs (offers count them taken) until its end is reported or it expires. The provider goes idle -> busy once fully rented (no GPU group with ' +
          '`min_gpus_per_rental` free GPUs left) and busy -> idle when GPUs are free again (unless its owner holds it); offline, error and ' +
          'maintenance are kept. A session reported ended before is 409 SESSION_ENDED (an ended session never runs ' +
          'again). Only admins and platform services.',
        params: sessionParams,
        body: sessionRunningBody,
        response: { 200: sessionReportSchema, ...errorsOf(400, 401, 403, 404, 409, 503) },
      },
    },
    async (request) => {
      const { providerID, sessionID } = request.params;
      const report = await sessions.report(callerOf(request), {
        providerId: providerID,
        sessionId: sessionID,
        active: true,
        gpuIndices: toGpuSet(request.body?.gpu_indices),
        kind: request.body?.kind,
        expiresAt: request.body?.expires_at ? new Date(request.body.expires_at) : null,
        correlationId: request.correlationId,
      });
      if (!report.active) throw registryErrors.sessionEnded(sessionID);
      return answer('session recorded as running', report);
    },
  );

  app.delete(
    '/providers/:providerID/sessions/:sessionID',
    {
      config,
      schema: {
        tags,
        operationId: 'reportSessionEnded',
        summary: 'Report a rental session ended (billing, without NATS)',
        description:
          'Idempotent; also for a session never reported running (it is kept as ended). Its GPUs are free again: ' +
          'the provider goes busy -> idle once a GPU group has `min_gpus_per_rental` free GPUs (unless its owner holds it); other states are kept. The first report of an end counts in the ' +
          "machine's reliability (with `end_reason`), a reservation's (`kind=reservation`) never. Only admins and " +
          'platform services.',
        params: sessionParams,
        querystring: endQuery,
        response: { 200: sessionReportSchema, ...errorsOf(400, 401, 403, 404, 503) },
      },
    },
    async (request) => {
      const { providerID, sessionID } = request.params;
      const report = await sessions.report(callerOf(request), {
        providerId: providerID,
        sessionId: sessionID,
        active: false,
        correlationId: request.correlationId,
        endReason: request.query.end_reason,
        renterId: request.query.renter_id,
        kind: request.query.kind,
      });
      return answer('session recorded as ended', report);
    },
  );
};
