/**
 * Presenters: domain values to the wire JSON (snake_case, amounts as decimal
 * strings at the token's scale, times in RFC 3339 UTC). Routes answer with
 * these; the response schemas beside the routes describe the same shapes.
 */
import type { BillingContext } from '../domain/context.ts';
import type { SessionEnd } from '../domain/session-end.ts';
import { billingRecordJson, type SessionRow, sessionJson } from '../domain/session-json.ts';
import type { UsageRecord, UsageResult } from '../domain/usage-message.ts';

/** What presenting needs from the context: the token's scale and the app's cache of rate JSON. */
export type PresentContext = Pick<BillingContext, 'scale' | 'state'>;

/** A session. */
export function presentSession(ctx: PresentContext, s: SessionRow) {
  return sessionJson(s, ctx.scale, ctx.state.ratesJson);
}

/** An ended session and its billing record. */
export function presentSessionEnd(ctx: PresentContext, end: SessionEnd) {
  return {
    session: presentSession(ctx, end.session),
    billing_record: billingRecordJson(end.billingRecord, ctx.scale),
    already_ended: end.alreadyEnded,
  };
}

/** A usage record. */
export function usageRecordJson(r: UsageRecord) {
  return {
    id: r.id,
    session_id: r.sessionId,
    message_id: r.messageId,
    timestamp: r.reportedAt.toISOString(),
    gpu_utilization: r.gpuUtilization,
    power_draw_w: r.powerDrawW,
    metrics: r.metrics,
    billed_minutes: r.billedMinutes,
    cost: r.cost,
    created_at: r.createdAt.toISOString(),
  };
}

/** The answer to one usage update. */
export function presentUsageResult(ctx: PresentContext, r: UsageResult) {
  return { duplicate: r.duplicate, usage: usageRecordJson(r.usage), session: presentSession(ctx, r.session) };
}
