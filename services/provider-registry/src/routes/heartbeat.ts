/**
 * POST /providers/{providerID}/heartbeat, and POST /providers/heartbeats for several machines at once. The single heartbeat's
 * body is optional: an empty body, with or without a JSON content type, is a heartbeat without metrics. They live in
 * their own plugin so its lenient JSON parser touches no other route.
 */
import { type App, callerOf, problemSchema, statusOf, toAppError } from '@gpu/common';
import type { FastifyPluginAsync } from 'fastify';
import { MANAGING_ROLES } from '../domain/access.ts';
import { UnknownGpuIndex } from '../errors.ts';
import { parseOptionalJson } from './optional-json.ts';
import type { ProviderRoutesOptions } from './options.ts';
import {
  heartbeatAnswered,
  heartbeatBatchResultSchema,
  heartbeatBatchSchema,
  heartbeatRefused,
  heartbeatSchema,
  MAX_HEARTBEATS_PER_REQUEST,
  providerIdParams,
  statusResultJson,
  statusResultSchema,
} from './schemas.ts';

export const heartbeatRoute: FastifyPluginAsync<ProviderRoutesOptions> = async (fastify, { registry }) => {
  const app = fastify as unknown as App;
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, parseOptionalJson);

  app.post(
    '/providers/:providerID/heartbeat',
    {
      config: { roles: MANAGING_ROLES },
      schema: {
        tags: ['providers'],
        operationId: 'sendHeartbeat',
        summary: 'Record a heartbeat from the provider daemon, with optional GPU metrics',
        description:
          'offline and error become idle (busy when fully rented or held by the owner); other states are kept. last_seen_at becomes now. Each gpu_metrics entry updates the GPU at `index` ' +
          "(its position in the provider's gpus array); an index the provider lacks is 400 UNKNOWN_GPU_INDEX and nothing is written.",
        params: providerIdParams,
        body: heartbeatSchema,
        response: {
          200: statusResultSchema,
          400: problemSchema,
          401: problemSchema,
          403: problemSchema,
          404: problemSchema,
          503: problemSchema,
        },
      },
    },
    async (request) => {
      const id = request.params.providerID;
      try {
        const metrics = request.body?.gpu_metrics ?? [];
        const result = await registry.heartbeat(callerOf(request), id, metrics, request.correlationId);
        return statusResultJson('heartbeat received', result);
      } catch (err) {
        throw err instanceof UnknownGpuIndex ? err.at('body.gpu_metrics') : err;
      }
    },
  );

  app.post(
    '/providers/heartbeats',
    {
      config: { roles: MANAGING_ROLES },
      schema: {
        tags: ['providers'],
        operationId: 'sendHeartbeats',
        summary: 'Record heartbeats of several machines at once (a daemon or relay beating for many machines)',
        description:
          `Up to ${MAX_HEARTBEATS_PER_REQUEST} heartbeats, each applied exactly as by POST ` +
          '/providers/{providerID}/heartbeat. The answer is 200 with one result per heartbeat, in order: ' +
          '`status_code` 200 with the status before and after, or the status of its problem (400 ' +
          'UNKNOWN_GPU_INDEX, 403 NOT_PROVIDER_OWNER or NOT_MACHINE_DAEMON, 404 PROVIDER_NOT_FOUND, 503). One refused ' +
          'heartbeat does not affect the others; a malformed one makes the whole request a 400 and none is applied.',
        body: heartbeatBatchSchema,
        response: { 200: heartbeatBatchResultSchema, 400: problemSchema, 401: problemSchema, 403: problemSchema },
      },
    },
    async (request) => {
      const actor = callerOf(request);
      const outcomes = await registry.heartbeats(
        request.body.heartbeats.map((b) => ({
          actor,
          id: b.provider_id,
          metrics: b.gpu_metrics,
          correlationId: request.correlationId,
        })),
      );
      const results = outcomes.map((outcome, i) => {
        if (!(outcome instanceof Error)) return heartbeatAnswered(outcome);
        const err = toAppError(
          outcome instanceof UnknownGpuIndex ? outcome.at(`body.heartbeats.${i}.gpu_metrics`) : outcome,
        );
        const status = statusOf(err);
        // A full queue answers 503 OVERLOADED by design: not a failure to log (a batch of them would be 1,000 lines).
        if (status >= 500 && err.code !== 'OVERLOADED') request.log.error({ err: outcome }, 'heartbeat failed');
        return heartbeatRefused(err, { request_id: request.id });
      });
      return { results };
    },
  );
};
