/**
 * Rental sessions on a provider, reported by billing when it runs without NATS (with NATS the same reports arrive as
 * billing's session events: adapters/billing-events-consumer.ts). `PUT` says a session runs on the provider,
 * `DELETE` that it ended; both are idempotent and apply the busy/idle rule of `domain/provider-sessions.ts`.
 */
import { type App, callerOf, problemSchema } from '@gpu/common';
import type { FastifyPluginAsync } from 'fastify';
import { z } from 'zod';
import { SESSION_REPORTING_ROLES } from '../domain/access.ts';
import type { ProviderSessions, SessionReport } from '../domain/provider-sessions.ts';
import { registryErrors } from '../errors.ts';
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
        '`provider_removed`, `provider_ended`) counts against its reliability, once per session',
    ),
  renter_id: z
    .uuid()
    .optional()
    .describe("the session's renter: a rental by the machine's own owner is not counted in its reliability"),
});

const answer = (message: string, r: SessionReport) => ({ message, ...r });

export const sessionRoutes: FastifyPluginAsync<SessionRoutesOptions> = async (fastify, opts) => {
  const app = fastify as unknown as App;
  const { sessions } = opts;
  const config = { roles: SESSION_REPORTING_ROLES };

  app.put(
    '/providers/:providerID/sessions/:sessionID',
    {
      config,
      schema: {
        tags,
        operationId: 'reportSessionRunning',
        summary: 'Report a rental session running on the provider (billing, without NATS)',
        description:
          'Idempotent. The provider goes idle -> busy; offline, error and maintenance are kept. ' +
          'A session reported ended before is 409 SESSION_ENDED (an ended session never runs again). ' +
          'Only admins and platform services.',
        params: sessionParams,
        response: { 200: sessionReportSchema, ...errorsOf(400, 401, 403, 404, 409, 503) },
      },
    },
    async (request) => {
      const { providerID, sessionID } = request.params;
      const report = await sessions.report(callerOf(request), providerID, sessionID, true, request.correlationId);
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
          'Idempotent; also for a session never reported running (it is kept as ended). The provider goes ' +
          'busy -> idle when no session is left; other states are kept. The first report of an end counts in the ' +
          "machine's reliability (with `end_reason`). Only admins and platform services.",
        params: sessionParams,
        querystring: endQuery,
        response: { 200: sessionReportSchema, ...errorsOf(400, 401, 403, 404, 503) },
      },
    },
    async (request) => {
      const { providerID, sessionID } = request.params;
      const report = await sessions.report(
        callerOf(request),
        providerID,
        sessionID,
        false,
        request.correlationId,
        request.query.end_reason,
        request.query.renter_id,
      );
      return answer('session recorded as ended', report);
    },
  );
};
