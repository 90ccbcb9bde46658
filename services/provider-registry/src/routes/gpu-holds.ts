/**
 * Billing's messages about machines' GPUs when it runs without NATS (with NATS the same arrive as billing's events:
 * adapters/billing-events-consumer.ts): `PUT /providers/{id}/gpus-held` states the GPUs billing's leases hold on the
 * machine (domain/gpu-holds.ts), `PUT /providers/{id}/ended-sessions/{sessionId}` a rental's end for the machine's
 * reliability. Both are idempotent, only for admins and platform services.
 */
import { type App, callerOf, problemSchema } from '@gpu/common';
import type { FastifyPluginAsync } from 'fastify';
import { z } from 'zod';
import { SESSION_REPORTING_ROLES } from '../domain/access.ts';
import type { GpuHolds } from '../domain/gpu-holds.ts';
import { gpusHeldSchema, sessionEndSchema } from '../wire/gpu-holds.ts';
import { schemas, statusSchema } from './schemas.ts';

export interface GpuHoldRoutesOptions {
  holds: GpuHolds;
}

const tags = ['leases'];
const errorsOf = (...codes: number[]) => Object.fromEntries(codes.map((c) => [c, problemSchema]));

const providerParams = z.object({ providerID: z.uuid().describe('provider UUID') });
const sessionParams = providerParams.extend({ sessionID: z.uuid().describe("billing's session UUID") });

const gpusHeldAnswer = z
  .object({
    provider_id: z.uuid(),
    applied: z
      .boolean()
      .describe('whether this statement was kept; false: one with the same or a greater version is kept already'),
    version: z.number().int().describe("the kept statement's version"),
    gpu_indices: z.array(z.number().int()).describe('the GPUs held as the kept statement names them'),
    previous_status: statusSchema,
    status: statusSchema,
  })
  .describe("The GPUs held on the machine as the registry keeps them, and the provider's status before and after")
  .register(schemas, { id: 'GpusHeld' });

const sessionEndAnswer = z
  .object({
    provider_id: z.uuid(),
    session_id: z.uuid(),
    counted: z
      .boolean()
      .describe("whether this call counted the end (false: counted before, or a rental of the owner's own machine)"),
  })
  .register(schemas, { id: 'SessionEndCounted' });

export const gpuHoldRoutes: FastifyPluginAsync<GpuHoldRoutesOptions> = async (fastify, opts) => {
  const app = fastify as unknown as App;
  const { holds } = opts;
  const config = { roles: SESSION_REPORTING_ROLES };

  app.put(
    '/providers/:providerID/gpus-held',
    {
      config,
      schema: {
        tags,
        operationId: 'stateGpusHeld',
        summary: "State the GPUs billing's leases hold on the machine (billing, without NATS)",
        description:
          "Billing owns which GPUs are free: after each change of a machine's leases it states every GPU they hold " +
          "(by position in the provider's `gpus` array), with a version that grows with each statement. The registry " +
          'keeps the statement with the greatest version and drops an older or repeated one (`applied: false`), so ' +
          'retries and reordering are harmless. Offers and `free_gpus` count the held GPUs taken; the provider goes ' +
          'idle -> busy once fully rented (no GPU group with `min_gpus_per_rental` free GPUs left) and busy -> idle ' +
          'when GPUs are free again (unless its owner holds it); offline, error and maintenance are kept. Only admins ' +
          'and platform services.',
        params: providerParams,
        body: gpusHeldSchema.register(schemas, { id: 'GpusHeldRequest' }),
        response: { 200: gpusHeldAnswer, ...errorsOf(400, 401, 403, 404, 503) },
      },
    },
    async (request) =>
      holds.state(callerOf(request), {
        providerId: request.params.providerID,
        version: request.body.version,
        gpuIndices: [...request.body.gpu_indices].sort((a, b) => a - b),
        correlationId: request.correlationId,
      }),
  );

  app.put(
    '/providers/:providerID/ended-sessions/:sessionID',
    {
      config,
      schema: {
        tags,
        operationId: 'reportSessionEnded',
        summary: "Report a rental's end for the machine's reliability (billing, without NATS)",
        description:
          "Idempotent: the first report of a session's end counts in the machine's reliability, against it when " +
          "`end_reason` is the machine's fault; a repeat counts nothing. A rental by the machine's own owner is never " +
          "counted. The GPUs it held are free once billing states the machine's held GPUs (`PUT .../gpus-held`). " +
          'Only admins and platform services.',
        params: sessionParams,
        body: sessionEndSchema.register(schemas, { id: 'SessionEndRequest' }),
        response: { 200: sessionEndAnswer, ...errorsOf(400, 401, 403, 404, 503) },
      },
    },
    async (request) => {
      const { providerID, sessionID } = request.params;
      const counted = await holds.countEnd(callerOf(request), {
        providerId: providerID,
        sessionId: sessionID,
        endReason: request.body.end_reason,
        renterId: request.body.renter_id,
      });
      return { provider_id: providerID, session_id: sessionID, counted };
    },
  );
};
