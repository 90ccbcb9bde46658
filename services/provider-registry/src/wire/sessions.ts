/**
 * Billing's session reports as they reach the registry, two ways: billing's session events over NATS
 * (`billing.events.session.*`, the body's `session`) and, without NATS, billing's calls (`PUT`/`DELETE
 * /providers/{id}/sessions/{sessionId}`). The GPUs a session holds have one schema and one mapping to the domain's
 * value, here, for both.
 */
import {
  LEASE_EVENT_KINDS,
  LEASE_KINDS,
  SESSION_ENDED_EVENT_KINDS,
  SESSION_RUNNING_EVENT_KINDS,
  zTimestamp,
} from '@gpu/common';
import { z } from 'zod';
import type { GpuSet, SessionReportInput } from '../domain/provider-sessions.ts';

/** The GPUs a session holds, by index: their positions in the provider's `gpus` array. */
const gpuIndexList = z
  .array(z.number().int().min(0).max(63).describe("a GPU's position in the provider's `gpus` array"))
  .min(1)
  .max(64)
  .refine((xs) => new Set(xs).size === xs.length, 'each GPU index at most once')
  .meta({ uniqueItems: true });
const gpuIndicesSchema = gpuIndexList
  .nullish()
  .describe('the GPUs the session holds, by index; absent or null: every GPU of the machine');

/** A lease's kind on the wire (absent: a session). */
export const leaseKindSchema = z
  .enum(LEASE_KINDS)
  .describe(
    "`session` (a rental; the default) or `reservation` (GPUs billing's scheduler holds for a renter until " +
      '`expires_at`; its end never counts in the reliability)',
  );

/** The body of `PUT /providers/{id}/sessions/{sessionId}` (optional: none holds the whole machine). */
export const sessionRunningSchema = z
  .object({
    gpu_indices: gpuIndicesSchema,
    kind: leaseKindSchema.optional(),
    expires_at: zTimestamp()
      .optional()
      .describe('when a reservation ends by itself (required for one, refused for a session)'),
  })
  .refine((b) => (b.kind === 'reservation') === (b.expires_at !== undefined), {
    message: 'a reservation names its expires_at, a session none',
    path: ['expires_at'],
  })
  .nullish()
  .describe(
    'What a running session (or reservation) holds; the body is optional (none, or `{}`: a session of every GPU of ' +
      'the machine)',
  );

const RUNNING_KINDS = SESSION_RUNNING_EVENT_KINDS;
const ENDED_KINDS = SESSION_ENDED_EVENT_KINDS;

/** What names a session in billing's session JSON, and what its end says. */
const sessionRef = {
  id: z.uuid(),
  provider_id: z.uuid(),
  user_id: z.uuid().optional(),
  end_reason: z.string().nullish(),
};

/**
 * The part of billing's session event the registry reads (the rest of its body is billing's session JSON). A running
 * session's event carries the GPUs it holds; an end's never depends on them (a malformed list cannot hold an end up).
 */
export const sessionEventSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.enum(RUNNING_KINDS), session: z.object({ ...sessionRef, gpu_indices: gpuIndicesSchema }) }),
  z.object({ kind: z.enum(ENDED_KINDS), session: z.object(sessionRef) }),
]);

/** The GPUs named (in index order), or null for every GPU of the machine. */
export function toGpuSet(indices: readonly number[] | null | undefined): GpuSet {
  return indices ? [...indices].sort((a, b) => a - b) : null;
}

/**
 * Billing's reservation events (`<prefix>.lease.reserved`: made, or restated with the GPUs it still holds;
 * `<prefix>.lease.released`: used up or cancelled before its expiry), the part the registry reads.
 */
export const leaseEventSchema = z.discriminatedUnion('kind', [
  z.object({
    kind: z.literal(LEASE_EVENT_KINDS[0]),
    reservation: z.object({
      id: z.uuid(),
      provider_id: z.uuid(),
      gpu_indices: gpuIndexList,
      expires_at: z.iso.datetime({ offset: true }).max(40),
    }),
  }),
  z.object({
    kind: z.literal(LEASE_EVENT_KINDS[1]),
    reservation: z.object({ id: z.uuid(), provider_id: z.uuid() }),
  }),
]);

/** Billing's reservation event as the report it makes. */
export function toLeaseReport(event: z.infer<typeof leaseEventSchema>): SessionReportInput {
  const { id, provider_id } = event.reservation;
  const report = { providerId: provider_id, sessionId: id, kind: 'reservation' as const };
  return event.kind === 'lease.reserved'
    ? {
        ...report,
        active: true,
        gpuIndices: toGpuSet(event.reservation.gpu_indices),
        expiresAt: new Date(event.reservation.expires_at),
      }
    : { ...report, active: false };
}

type SessionEvent = z.infer<typeof sessionEventSchema>;
type RunningEvent = Extract<SessionEvent, { kind: (typeof RUNNING_KINDS)[number] }>;

const isRunning = (event: SessionEvent): event is RunningEvent =>
  (RUNNING_KINDS as readonly string[]).includes(event.kind);

/** Billing's session event as the report it makes (`ProviderSessions.report`). */
export function toSessionReport(event: SessionEvent): SessionReportInput {
  const { id, provider_id, user_id, end_reason } = event.session;
  const report = { providerId: provider_id, sessionId: id, endReason: end_reason, renterId: user_id };
  return isRunning(event)
    ? { ...report, active: true, gpuIndices: toGpuSet(event.session.gpu_indices) }
    : { ...report, active: false };
}
