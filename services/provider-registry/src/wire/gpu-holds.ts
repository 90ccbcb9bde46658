/**
 * Billing's messages about machines' GPUs as the registry's bus reads them (adapters/billing-messages.ts), over NATS
 * or its HTTP inbox alike: a statement of a machine's held GPUs, and a rental's end. Unknown fields are dropped: a
 * billing newer than the registry keeps its messages flowing.
 */
import { GPUS_HELD_EVENT_KIND, ignoringUnknownFields } from '@gpu/common';
import { z } from 'zod';

/** The GPUs held, by index: their positions in the provider's `gpus` array. */
const gpuIndexList = z
  .array(z.number().int().min(0).max(63).describe("a GPU's position in the provider's `gpus` array"))
  .max(64)
  .refine((xs) => new Set(xs).size === xs.length, 'each GPU index at most once')
  .meta({ uniqueItems: true });

/** Billing's statement of the GPUs its leases hold on a machine (`lease.held`). */
export const gpusHeldEventSchema = ignoringUnknownFields(
  z.object({
    kind: z.literal(GPUS_HELD_EVENT_KIND),
    provider_id: z.uuid(),
    version: z
      .number()
      .int()
      .min(1)
      .max(Number.MAX_SAFE_INTEGER)
      .describe("grows with each of billing's statements of the machine: the greatest is kept, an older one dropped"),
    gpu_indices: gpuIndexList.describe(
      'every GPU billing holds on the machine now (rentals and reservations); [] none',
    ),
    bids: z
      .record(
        z
          .string()
          .max(2)
          .regex(/^\d{1,2}$/, 'a GPU index'),
        z
          .string()
          .max(91)
          .regex(/^\d{1,30}(\.\d{1,60})?$/, 'expected a non-negative decimal string'),
      )
      .refine((b) => Object.keys(b).length <= 64, 'at most 64 GPUs')
      .default({})
      .describe(
        'the held GPUs interruptible sessions hold, by index: their bids per GPU-hour ({}: none, or older billing)',
      ),
  }),
).describe("The GPUs billing's leases hold on a machine, as of one version");

/** Billing's event of a rental's end, the part the registry reads (its reason and renter, for the reliability). */
export const sessionEndedEventSchema = <K extends 'session.completed' | 'session.terminated'>(kind: K) =>
  ignoringUnknownFields(
    z.object({
      kind: z.literal(kind),
      session: z.object({
        id: z.uuid(),
        provider_id: z.uuid(),
        user_id: z.uuid().optional().describe("the renter: a rental by the machine's own owner is not counted"),
        end_reason: z
          .string()
          .max(200)
          .nullish()
          .describe("billing's end reason; a fault of the machine's counts against its reliability"),
      }),
    }),
  ).describe(`A rental's end (${kind}), counted once in the machine's reliability`);
