/**
 * A provider that stops delivering stops costing. When the provider registry reports a machine `offline` (missed
 * heartbeats, or set by hand) or `error`, every running session on it is ended `terminated` with the reason
 * `provider_offline` / `provider_error`, each in a transaction of its own under its row lock (`finishSession`).
 *
 * **What was delivered.** The renter pays the minutes the provider's daemon vouched for: the minutes billed when
 * billing received the session's newest usage report (every usage record keeps them; they are counted on billing's
 * clock, never the daemon's), not the minutes the biller has held since. Between the machine's last sign of life
 * and the registry's verdict (up to the offline bound, 90 s by default, plus a sweep) the biller keeps holding
 * minutes; those are released, never captured. A session without any usage report is settled at 0 minutes (nothing
 * was reported delivered). The fee split, the provider's earnings and the BillingRecord follow as for any end.
 *
 * **Idempotent.** A session that has ended (by its renter, the biller, or an earlier delivery of the same event) is
 * skipped under its lock, so a redelivered event ends nothing twice. Only sessions that started before the status
 * change (`occurred_at`) are ended, so a late or redelivered event never ends a session started after the machine
 * came back. Should one session fail (the database away), the caller retries the event and the rest are ended then.
 */
import { minutesAtLastReport, providersWithSessions, sessionIdsOfProvider } from '../db/provider-offline-repository.ts';
import type { BillingContext } from './context.ts';
import { finishSession, type SessionEnd } from './session-end.ts';
import { isRunning, loadSession, RUNNING_STATUSES } from './sessions.ts';

/** Registry statuses in which a machine delivers nothing: its sessions end. */
export const UNDELIVERING_STATUSES = ['offline', 'error'] as const;

/** A provider's status change as the registry reports it. */
export interface ProviderStatusChange {
  providerId: string;
  status: string;
  /** When the change happened (the registry's clock). */
  occurredAt: Date;
  correlationId?: string;
}

/** Whether a provider in `status` delivers nothing. */
export const isUndelivering = (status: string) => (UNDELIVERING_STATUSES as readonly string[]).includes(status);

/**
 * Ends the provider's running sessions (started before the change) when the change leaves it offline or in error;
 * the sessions this call ended (none for any other status).
 */
export async function endSessionsOfStoppedProvider(
  ctx: BillingContext,
  change: ProviderStatusChange,
): Promise<SessionEnd[]> {
  if (!isUndelivering(change.status)) return [];
  const reason = `provider_${change.status}`;
  const ended: SessionEnd[] = [];
  for (const id of await sessionIdsOfProvider(ctx.db, change.providerId, RUNNING_STATUSES)) {
    const end = await ctx.db.transaction().execute(async (trx) => {
      const session = await loadSession(trx, id, true);
      if (!isRunning(session)) return null;
      if (new Date(session.started_at).getTime() >= change.occurredAt.getTime()) return null;
      const deliveredMinutes = await minutesAtLastReport(trx, id);
      return finishSession(ctx, trx, session, { status: 'terminated', reason, deliveredMinutes }, change.correlationId);
    });
    if (end) ended.push(end);
  }
  if (ended.length > 0) {
    ctx.logger.info(
      { provider_id: change.providerId, status: change.status, sessions: ended.map((e) => e.session.id) },
      'sessions of a provider that stopped delivering ended',
    );
  }
  return ended;
}

/**
 * Without NATS (`pnpm start`), billing hears of no status change: it asks instead. Every run looks up, at the
 * provider registry, each machine that has running sessions, and ends those of a machine that is offline, in error
 * or gone from the registry (exactly as the event would). One registry call per such machine; a machine the
 * registry cannot be asked about is left for the next run. The sessions that were ended.
 */
export async function checkRunningProviders(ctx: BillingContext, pageSize = 200): Promise<SessionEnd[]> {
  const directory = ctx.providers;
  if (!directory) return [];
  const ended: SessionEnd[] = [];
  let after: string | undefined;
  for (;;) {
    const ids = await providersWithSessions(ctx.db, RUNNING_STATUSES, pageSize, after);
    for (const providerId of ids) {
      const now = ctx.now();
      let status: string;
      try {
        status = (await directory.provider(providerId))?.status ?? 'offline';
      } catch (err) {
        ctx.logger.warn({ err: (err as Error).message, provider_id: providerId }, 'provider status unknown; next run');
        continue;
      }
      ended.push(...(await endSessionsOfStoppedProvider(ctx, { providerId, status, occurredAt: now })));
    }
    if (ids.length < pageSize) return ended;
    after = ids.at(-1);
  }
}
