/**
 * Usage updates from provider daemons (HTTP or NATS): one usage record per
 * message ID and session (a duplicate answers the first record and changes
 * nothing), elapsed time billed (session-billing.ts), `actual_power_w` taken
 * from the newest report only, so updates may arrive late, twice or out of
 * order. A session that is not running refuses new updates (409
 * SESSION_NOT_ACTIVE); a session whose grace period is over is terminated.
 */
import { randomUUID } from 'node:crypto';
import type { Selectable } from 'kysely';
import type { UsageRecordTable } from '../db/schema.ts';
import { billingErrors } from '../errors.ts';
import type { BillingContext } from './context.ts';
import { Dec, formatAmount } from './money.ts';
import { billElapsed } from './session-billing.ts';
import { finishSession } from './session-end.ts';
import { isRunning, loadSession, sessionJson } from './session-json.ts';

export interface UsageUpdate {
  sessionId: string;
  messageId: string;
  timestamp: Date;
  gpuUtilization: number;
  powerDrawW: number;
  metrics?: Record<string, unknown>;
  correlationId?: string;
}

export function usageRecordJson(r: Selectable<UsageRecordTable>, scale: number) {
  return {
    id: r.id,
    session_id: r.session_id,
    message_id: r.message_id,
    timestamp: new Date(r.reported_at).toISOString(),
    gpu_utilization: new Dec(r.gpu_utilization).toNumber(),
    power_draw_w: new Dec(r.power_draw_w).toNumber(),
    metrics: (r.metrics ?? null) as Record<string, unknown> | null,
    billed_minutes: r.billed_minutes,
    cost: formatAmount(r.cost, scale),
    created_at: new Date(r.created_at).toISOString(),
  };
}

/** Applies one usage update exactly once; `duplicate` when the message was already applied. */
export async function applyUsageUpdate(ctx: BillingContext, u: UsageUpdate) {
  return ctx.db.transaction().execute(async (trx) => {
    const session = await loadSession(trx, u.sessionId, true);
    const existing = await trx
      .selectFrom('usage_records')
      .selectAll()
      .where('session_id', '=', u.sessionId)
      .where('message_id', '=', u.messageId)
      .executeTakeFirst();
    if (existing) {
      return { duplicate: true, usage: usageRecordJson(existing, ctx.scale), session: sessionJson(session, ctx.scale) };
    }
    if (!isRunning(session)) throw billingErrors.sessionNotActive(session.id, session.status);
    const newest = !session.last_usage_at || u.timestamp.getTime() >= new Date(session.last_usage_at).getTime();
    const outcome = await billElapsed(
      ctx,
      trx,
      session,
      u.correlationId,
      newest ? { actualPowerW: String(u.powerDrawW), lastUsageAt: u.timestamp } : undefined,
    );
    const current = outcome.session;
    const record = await trx
      .insertInto('usage_records')
      .values({
        id: randomUUID(),
        session_id: session.id,
        message_id: u.messageId,
        reported_at: u.timestamp,
        gpu_utilization: String(u.gpuUtilization),
        power_draw_w: String(u.powerDrawW),
        metrics: u.metrics ? JSON.stringify(u.metrics) : null,
        billed_minutes: current.billed_minutes,
        cost: outcome.billed.toFixed(),
        created_at: ctx.now(),
      })
      .returningAll()
      .executeTakeFirstOrThrow();
    if (outcome.expired) {
      const ended = await finishSession(
        ctx,
        trx,
        current,
        { status: 'terminated', reason: 'insufficient_funds' },
        u.correlationId,
      );
      return { duplicate: false, usage: usageRecordJson(record, ctx.scale), session: ended.session };
    }
    return { duplicate: false, usage: usageRecordJson(record, ctx.scale), session: sessionJson(current, ctx.scale) };
  });
}
