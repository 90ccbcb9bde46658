/** Reservations of a machine's GPUs for a renter, by the scheduler (domain/leases/reservations.ts). */
import { type App, callerOf, noBody } from '@gpu/common';
import { z } from 'zod';
import { cancelReservation, DEFAULT_RESERVATION_MS, MAX_RESERVATION_MS, reserveGpus } from '../domain/leases/index.ts';
import { reservationJson } from '../wire/presenters.ts';
import { RESERVATION_ROLES } from './access.ts';
import type { RouteDeps } from './deps.ts';
import { problems, schemas } from './schemas.ts';

const reservationBody = z
  .object({
    user_id: z.uuid().describe('the renter the GPUs are held for: only a start for this user may use them'),
    provider_id: z.uuid(),
    gpu_model: z.string().min(1).max(200).describe('matched by model key (`H100` finds `NVIDIA H100 80GB HBM3`)'),
    gpu_count: z.number().int().min(1).max(64).default(1),
    ttl_seconds: z
      .number()
      .int()
      .min(1)
      .max(MAX_RESERVATION_MS / 1000)
      .default(DEFAULT_RESERVATION_MS / 1000)
      .describe('how long the GPUs are held unless a start takes them'),
  })
  .register(schemas, { id: 'ReservationRequest' });

const reservationSchema = z
  .object({
    id: z.uuid().describe('name it as `reservation_id` in POST /billing/start-session'),
    user_id: z.uuid(),
    provider_id: z.uuid(),
    gpu_model: z.string().describe('the model as the machine reports it'),
    gpu_indices: z.array(z.number().int()).describe("the GPUs held, by their index in the registry's record"),
    expires_at: z.string(),
  })
  .register(schemas, { id: 'Reservation' });

export async function reservationRoutes(app: App, deps: RouteDeps) {
  const ctx = deps.billing;

  app.post(
    '/api/v1/billing/reservations',
    {
      config: { roles: RESERVATION_ROLES },
      schema: {
        tags: ['sessions'],
        operationId: 'reserveGpus',
        summary: "Hold N of a machine's GPUs for a renter for a short time (the scheduler)",
        description:
          'The GPUs are chosen as a start would choose them (the lowest-indexed free healthy GPUs of the model; ' +
          "409 GPU_GROUP_TOO_SMALL below the machine's `min_gpus_per_rental`, 409 PROVIDER_NOT_AVAILABLE when not " +
          "enough are free) and held until `expires_at`: no other start or reservation gets them. The renter's " +
          '`POST /billing/start-session` with `reservation_id` rents exactly these GPUs; unused, they are free ' +
          "again at `expires_at`. Reserving costs nothing. Only the scheduler's client, platform services and admins.",
        body: reservationBody,
        response: { 201: reservationSchema, ...problems(400, 403, 404, 409, 503) },
      },
    },
    async (request, reply) => {
      const b = request.body;
      const reservation = await reserveGpus(ctx, {
        actor: callerOf(request),
        userId: b.user_id,
        providerId: b.provider_id,
        gpuModel: b.gpu_model,
        gpuCount: b.gpu_count,
        ttlMs: b.ttl_seconds * 1000,
        correlationId: request.correlationId,
      });
      return reply.code(201).send(reservationJson(reservation));
    },
  );

  app.delete(
    '/api/v1/billing/reservations/:reservationID',
    {
      config: { roles: RESERVATION_ROLES },
      schema: {
        tags: ['sessions'],
        operationId: 'cancelReservation',
        summary: "Free a reservation's GPUs before it expires",
        description:
          '204; 404 RESERVATION_NOT_FOUND when it holds no GPUs (unknown, expired, or already used by a start). ' +
          "Only the scheduler's client, platform services and admins.",
        params: z.object({ reservationID: z.uuid() }),
        response: { 204: noBody('freed'), ...problems(400, 403, 404) },
      },
    },
    async (request, reply) => {
      await cancelReservation(ctx, callerOf(request), request.params.reservationID, request.correlationId);
      return reply.code(204).send(null);
    },
  );
}
