/**
 * POST /providers/{providerID}/heartbeat. The body is optional: an empty
 * body, with or without a JSON content type, is a heartbeat without metrics.
 * It lives in its own plugin so its lenient JSON parser touches no other route.
 */
import { type App, callerOf, problemSchema } from '@gpu/common';
import type { FastifyPluginAsync } from 'fastify';
import { MANAGING_ROLES } from '../domain/access.ts';
import { UnknownGpuIndex } from '../errors.ts';
import { parseOptionalJson } from './optional-json.ts';
import type { ProviderRoutesOptions } from './options.ts';
import { heartbeatSchema, providerIdParams, statusResultJson, statusResultSchema } from './schemas.ts';

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
};
