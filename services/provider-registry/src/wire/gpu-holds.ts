/**
 * Billing's messages about machines' GPUs as they reach the registry, two ways: billing's events over NATS
 * (`billing.events.lease.held`, `billing.events.session.*`) and, without NATS, billing's calls (`PUT
 * /providers/{id}/gpus-held`, `PUT /providers/{id}/ended-sessions/{sessionId}`). Each has one schema here for both.
 */
import { GPUS_HELD_EVENT_KIND, SESSION_ENDED_EVENT_KINDS, SESSION_RUNNING_EVENT_KINDS } from '@gpu/common';
import { z } from 'zod';

/** The GPUs held, by index: their positions in the provider's `gpus` array. */
const gpuIndexList = z
  .array(z.number().int().min(0).max(63).describe("a GPU's position in the provider's `gpus` array"))
  .max(64)
  .refine((xs) => new Set(xs).size === xs.length, 'each GPU index at most once')
  .meta({ uniqueItems: true });

/** Billing's statement of a machine's held GPUs (the body of `PUT /providers/{id}/gpus-held`). */
export const gpusHeldSchema = z
  .object({
    version: z
      .number()
      .int()
      .min(1)
      .max(Number.MAX_SAFE_INTEGER)
      .describe("grows with each of billing's statements of the machine: the greatest is kept, an older one dropped"),
    gpu_indices: gpuIndexList.describe(
      'every GPU billing holds on the machine now (rentals and reservations); [] none',
    ),
  })
  .describe("The GPUs billing's leases hold on the machine, as of one version");

/** Billing's `lease.held` event, the part the registry reads. */
export const gpusHeldEventSchema = z.object({
  kind: z.literal(GPUS_HELD_EVENT_KIND),
  provider_id: z.uuid(),
  ...gpusHeldSchema.shape,
});

/** What a rental's end says for the machine's reliability (the body of `PUT .../ended-sessions/{sessionId}`). */
export const sessionEndSchema = z
  .object({
    end_reason: z
      .string()
      .min(1)
      .max(200)
      .nullish()
      .describe(
        "billing's end reason; a fault of the machine's (`provider_offline`, `provider_error`, `provider_maintenance`, " +
          '`provider_removed`, `provider_ended`, `workload_not_started`, `workload_lost`) counts against its reliability',
      ),
    renter_id: z
      .uuid()
      .optional()
      .describe("the session's renter: a rental by the machine's own owner is not counted in its reliability"),
  })
  .describe("A rental's end, counted once in the machine's reliability");

/**
 * Billing's session events, the part the registry reads: an end (its reason and renter, for the reliability); a
 * running session's events say nothing the registry keeps (the GPUs it holds come with `lease.held`).
 */
export const sessionEventSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.enum(SESSION_RUNNING_EVENT_KINDS) }),
  z.object({
    kind: z.enum(SESSION_ENDED_EVENT_KINDS),
    session: z.object({
      id: z.uuid(),
      provider_id: z.uuid(),
      user_id: z.uuid().optional(),
      end_reason: z.string().nullish(),
    }),
  }),
]);
