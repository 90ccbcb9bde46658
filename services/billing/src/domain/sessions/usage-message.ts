/**
 * The usage message of a provider daemon, which arrives two ways: as the body of
 * POST /billing/usage-update(s) and as the payload of a NATS message on
 * `billing.usage.<session_id>`. One schema validates both, and one mapping
 * turns either into the domain's `UsageUpdate` (usage-updates.ts applies it).
 */
import { isStorableJson, type Principal, zTimestamp } from '@gpu/common';
import { z } from 'zod';
import type { SessionRow } from '../../db/session-repository.ts';

/** How deep `metrics` may nest (a daemon's metrics are flat or nearly so). */
const MAX_METRICS_DEPTH = 8;

/**
 * The usage message (HTTP body and NATS payload on `billing.usage.<session_id>`). Unknown fields are refused on both
 * ways in, as on every route (docs/conventions.md): a report is a record of the money path, and a sender must never
 * believe it set what billing alone decides (`cost`, `billed_minutes`). What a daemon newer than billing measures goes
 * in `metrics`, which stays free-form; the session is billed by billing's clock whatever its reports say.
 */
export const usageMessageSchema = z.object({
  session_id: z.uuid(),
  timestamp: zTimestamp().describe(
    'when the daemon measured (RFC 3339, from 1970 up to 2100; at most `billing.max_clock_skew` ahead of the ' +
      "service's clock and not before the session started, less that skew)",
  ),
  gpu_utilization: z.number().min(0).max(100).describe('percent'),
  power_draw_w: z.number().min(0).max(100_000),
  metrics: z
    .record(z.string().max(256), z.unknown())
    .refine(
      (m) => isStorableJson(m, MAX_METRICS_DEPTH),
      `metrics may nest at most ${MAX_METRICS_DEPTH} levels and contain no NUL characters`,
    )
    .optional()
    .describe(
      'free-form extra metrics, stored as given (at most 8 levels deep; no NUL characters: PostgreSQL jsonb refuses them)',
    ),
  message_id: z
    .string()
    .min(1)
    .max(255)
    .refine((id) => !id.includes('\0'), 'message_id may not contain NUL characters')
    .optional()
    .describe(
      'de-duplication key (no NUL characters); else the Idempotency-Key header (HTTP) or Nats-Msg-Id (NATS), ' +
        'else the timestamp',
    ),
});

export type UsageMessage = z.infer<typeof usageMessageSchema>;

/** Most reports in one batch (POST /usage-updates, a NATS message of several). */
export const MAX_REPORTS_PER_BATCH = 256;

/**
 * A daemon's usage request over core NATS (`{reports: [...]}`): a machine's reports at once, on the subject that names
 * its sender (`<usage_reports>.<owner ID>.<client ID>.<provider ID>`). Each report is applied as if it came alone.
 */
export const usageReportsRequestSchema = z.object({
  reports: z.array(usageMessageSchema).min(1).max(MAX_REPORTS_PER_BATCH),
});
export type UsageReportsRequest = z.infer<typeof usageReportsRequestSchema>;

/** One usage report as the domain applies it. */
export interface UsageUpdate {
  sessionId: string;
  /** What makes a report unique within its session: a repeat is applied once. */
  messageId: string;
  timestamp: Date;
  gpuUtilization: number;
  powerDrawW: number;
  metrics?: Record<string, unknown>;
  correlationId?: string;
  /** Who sent it (authenticated over HTTP or by the NATS message's token): must be allowed to report the session. */
  sender: Principal;
}

/**
 * The domain's update from a message. The message ID is the message's `message_id`, else `fallbackId` (the
 * Idempotency-Key header over HTTP, the Nats-Msg-Id header over NATS), else the timestamp.
 */
export function toUsageUpdate(
  m: UsageMessage,
  fallbackId: string | undefined,
  correlationId: string | undefined,
  sender: Principal,
): UsageUpdate {
  const timestamp = new Date(m.timestamp);
  return {
    sessionId: m.session_id,
    messageId: m.message_id ?? fallbackId ?? `ts:${timestamp.toISOString()}`,
    timestamp,
    gpuUtilization: m.gpu_utilization,
    powerDrawW: m.power_draw_w,
    metrics: m.metrics,
    correlationId,
    sender,
  };
}

/** A usage record: one applied report, with what its billing charged. */
export interface UsageRecord {
  id: string;
  sessionId: string;
  messageId: string;
  /** When the daemon measured. */
  reportedAt: Date;
  gpuUtilization: number;
  powerDrawW: number;
  metrics: Record<string, unknown> | null;
  /** The session's billed minutes after this update. */
  billedMinutes: number;
  /** Cost billed by this update, at the token's scale. */
  cost: string;
  createdAt: Date;
}

/** What applying one usage update comes to, for a sender answered a status per report (NATS). */
export interface UsageOutcome {
  /** Whether the message had been applied before (nothing changed). */
  duplicate: boolean;
  usage: UsageRecord;
}

/** An update as a usage batch takes it: `withSession` when its caller answers with the session (HTTP). */
export type BatchedUsageUpdate = UsageUpdate & { withSession?: boolean };

/** A usage batch's answer to one update: with the session when the update asked for it. */
export type BatchedUsageResult = UsageOutcome & { session?: SessionRow };

/** What applying one usage update comes to, with the session (the answer over HTTP). */
export interface UsageResult extends UsageOutcome {
  /** The session once the update's transaction is done. */
  session: SessionRow;
}
