/**
 * A provider that stops delivering stops costing. When the provider registry reports a machine `offline` (missed
 * heartbeats, or set by hand), in `maintenance` or `error`, or removes it (`DELETE /providers/{id}`: the
 * `provider.removed` event, or a machine the registry no longer knows), every running session on it is ended
 * `terminated` with the reason `provider_offline` / `provider_maintenance` / `provider_error` / `provider_removed`,
 * each in a transaction of its own under its row lock (`finishSession`).
 *
 * **What was delivered.** The renter pays the minutes the provider's daemon vouched for: the minutes billed when
 * billing received the session's newest usage report before the change (every usage record keeps them; they are
 * counted on billing's clock, never the daemon's), not the minutes the biller has held since. Between the machine's
 * last sign of life and the registry's verdict (up to the offline bound, 90 s by default, plus a sweep) the biller
 * keeps holding minutes; those are released, never captured, as is anything reported after the change. A session
 * without any usage report is settled at 0 minutes (nothing was reported delivered). The fee split, the provider's
 * earnings and the BillingRecord follow as for any end.
 *
 * **Idempotent.** A session that has ended (by its renter, the biller, or an earlier delivery of the same event, on
 * this billing instance or another) is skipped under its lock, so a redelivered event ends nothing twice. Only
 * sessions that started before a status change (`occurred_at`) are ended, so a late or redelivered event never ends
 * a session started after the machine came back; a removed machine never comes back (a registration makes a new
 * ID), so its removal ends every session still running on it. Should one session fail (the database away), the
 * caller retries the event and the rest are ended then.
 */
import { type UNDELIVERED_END_REASONS, UNDELIVERING_STATUSES } from '@gpu/common';
import {
  minutesAtLastReport,
  providersWithSessions,
  sessionIdsOfProvider,
} from '../../db/provider-offline-repository.ts';
import { bindSessionsToClient } from '../../db/session-repository.ts';
import type { BillingContext } from '../context.ts';
import { stateNotedLeases } from '../leases/index.ts';
import { finishSession, type SessionEnd } from './end.ts';
import { isRunning, loadSession, RUNNING_STATUSES } from './session.ts';

/** The status a change names when the registry removed the machine (its `provider.removed` event, or a 404). */
export const REMOVED = 'removed';

/** A provider's status change (or removal) as the registry reports it. */
export interface ProviderStatusChange {
  providerId: string;
  /** The registry's status of the machine now, or `REMOVED`. */
  status: string;
  /** When the change happened (the registry's clock). */
  occurredAt: Date;
  correlationId?: string;
}

/** Whether a provider in `status` delivers nothing (`REMOVED` included). */
const isUndelivering = (status: string): status is (typeof UNDELIVERING_STATUSES)[number] | typeof REMOVED =>
  status === REMOVED || (UNDELIVERING_STATUSES as readonly string[]).includes(status);

/**
 * Ends the provider's running sessions when the change leaves it offline, in maintenance or in error (those that
 * started before the change) or removed (all of them); the sessions this call ended (none for any other status).
 */
export async function endSessionsOfStoppedProvider(
  ctx: BillingContext,
  change: ProviderStatusChange,
): Promise<SessionEnd[]> {
  const { status } = change;
  if (!isUndelivering(status)) return [];
  const removed = status === REMOVED;
  // One of the end reasons common names for a machine that stopped delivering (which the command line reads).
  const reason: (typeof UNDELIVERED_END_REASONS)[number] = `provider_${status}`;
  const ended: SessionEnd[] = [];
  for (const id of await sessionIdsOfProvider(ctx.db, change.providerId, RUNNING_STATUSES)) {
    const end = await ctx.db.transaction().execute(async (trx) => {
      const session = await loadSession(trx, id, true);
      if (!isRunning(session)) return null;
      if (!removed && new Date(session.started_at).getTime() >= change.occurredAt.getTime()) return null;
      const deliveredMinutes = await minutesAtLastReport(trx, id, change.occurredAt);
      const end = await finishSession(
        ctx,
        trx,
        session,
        { status: 'terminated', reason, deliveredMinutes },
        change.correlationId,
      );
      await stateNotedLeases(ctx, trx, change.correlationId);
      return end;
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
 * A machine bound to another daemon client (the registry's `provider.daemon_bound` event, or its record seen by
 * `checkRunningProviders`): its running sessions take usage and workload reports from that client from now on
 * (`access.ts`, `mayReportUsage`), so an owner who re-binds a machine after a reinstall keeps its rentals reported.
 * With a registry the binding is read from it now, whatever the event said: events of two re-bindings may arrive in
 * either order, the registry's record is the last word. How many sessions moved.
 */
export async function followDaemonBinding(
  ctx: BillingContext,
  change: { providerId: string; clientId: string | null; correlationId?: string },
): Promise<number> {
  let clientId = change.clientId;
  if (ctx.providers) {
    const machine = await ctx.providers.provider(change.providerId, change.correlationId);
    // Removed: its sessions end by the removal's own event.
    if (!machine) return 0;
    clientId = machine.daemonClientId;
  }
  const moved = await bindSessionsToClient(ctx.db, change.providerId, RUNNING_STATUSES, clientId);
  if (moved > 0) {
    ctx.logger.info(
      { provider_id: change.providerId, daemon_client_id: clientId, sessions: moved },
      "running sessions follow their machine's daemon binding",
    );
  }
  return moved;
}

/**
 * Without NATS (`pnpm start`), billing hears of no status change: it asks instead. Every run looks up, at the
 * provider registry, each machine that has running sessions, and ends those of a machine that is offline, in
 * maintenance, in error or gone from the registry (removed: exactly as the events would), and moves the others'
 * sessions to the daemon their machine is bound to now (`followDaemonBinding`). One registry call per such machine; a
 * machine the registry cannot be asked about is left for the next run. The sessions that were ended.
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
      let machine: Awaited<ReturnType<typeof directory.provider>>;
      try {
        machine = await directory.provider(providerId);
      } catch (err) {
        ctx.logger.warn({ err: (err as Error).message, provider_id: providerId }, 'provider status unknown; next run');
        continue;
      }
      const status = machine?.status ?? REMOVED;
      ended.push(...(await endSessionsOfStoppedProvider(ctx, { providerId, status, occurredAt: now })));
      if (machine) await bindSessionsToClient(ctx.db, providerId, RUNNING_STATUSES, machine.daemonClientId);
    }
    if (ids.length < pageSize) return ended;
    after = ids.at(-1);
  }
}
