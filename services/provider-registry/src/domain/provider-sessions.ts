/**
 * Rented providers are `busy`: the registry keeps the rental sessions billing reports for each provider (billing's
 * session events over NATS JetStream, or billing's calls to `PUT`/`DELETE /providers/{id}/sessions/{sessionId}`
 * when it runs without NATS) and applies one rule, under the provider's row lock:
 *
 * - a provider with at least one active session goes `idle` -> `busy`;
 * - a provider with none goes `busy` -> `idle`;
 * - every other state is kept: `offline`, `error` and `maintenance` are the machine's or the operator's word, never
 *   overridden by a rental (a heartbeat that revives an offline machine brings it to `idle`, as always; the next
 *   session event applies the rule again).
 *
 * Applying a report twice, or reports out of order, is harmless: a session's row is a set membership, and an ended
 * session is kept as an ended marker, so a late "started" never brings it back. A status change goes through the
 * registry's status events (reasons `session_started`, `session_ended`), recorded with the change.
 */
import type { Principal, RetryOptions } from '@gpu/common';
import { withRetry } from '@gpu/common';
import type { Kysely } from 'kysely';
import { refreshReliability } from '../db/offer-repository.ts';
import { countSessionEnd } from '../db/reliability-repository.ts';
import type { RegistryDB } from '../db/schema.ts';
import { hasActiveSession, lockProviderStatus, moveStatus, upsertSession } from '../db/session-repository.ts';
import { registryErrors } from '../errors.ts';
import { assertMayTrackSessions } from './access.ts';
import type { ProviderStatus } from './provider.ts';
import { isProviderFault } from './reliability.ts';
import type { StatusOutbox } from './status-events.ts';

/** The state a provider in `BUSY_FROM` takes while rented, and returns to from `busy` when no session is left. */
const BUSY_FROM: ProviderStatus = 'idle';

/** The move the rule makes for a provider in `current` with or without an active session; null: none. */
function rentalMove(current: ProviderStatus, rented: boolean): { from: ProviderStatus; to: ProviderStatus } | null {
  if (rented && current === BUSY_FROM) return { from: BUSY_FROM, to: 'busy' };
  if (!rented && current === 'busy') return { from: 'busy', to: BUSY_FROM };
  return null;
}

/**
 * Whether an explicit status change (PATCH status, a full update, a registration) contradicts the provider's rental
 * sessions. Only billing's session reports move a machine between `busy` and `idle`, so:
 *
 * - `busy` is refused without a running session (`not_rented`): nobody else may take a machine off the market as if
 *   it were rented;
 * - `idle` is refused while a session runs (`rented`): the machine is the renter's until billing ends the session;
 * - `offline`, `maintenance` and `error` are always allowed, rented or not: the owner takes the machine away, and
 *   billing ends its running sessions billed to the last minute the daemon reported, as for a machine that goes
 *   offline by itself.
 *
 * Null when the change is allowed.
 */
function explicitStatusConflict(target: ProviderStatus, rented: boolean): 'rented' | 'not_rented' | null {
  if (target === 'busy' && !rented) return 'not_rented';
  if (target === BUSY_FROM && rented) return 'rented';
  return null;
}

/** Throws STATUS_CONTRADICTS_SESSIONS when `explicitStatusConflict` refuses the change. */
export function assertExplicitStatus(providerId: string | null, target: ProviderStatus, rented: boolean): void {
  const conflict = explicitStatusConflict(target, rented);
  if (conflict) throw registryErrors.statusContradictsSessions(providerId, target, conflict);
}

/** What a session report did. */
export interface SessionReport {
  provider_id: string;
  session_id: string;
  /** Whether the session is active now (false once it ended, whatever was reported after). */
  active: boolean;
  previous_status: ProviderStatus;
  status: ProviderStatus;
}

export interface ProviderSessionsDeps {
  db: Kysely<RegistryDB>;
  outbox: StatusOutbox;
  retry?: RetryOptions;
}

export class ProviderSessions {
  constructor(private readonly deps: ProviderSessionsDeps) {}

  /**
   * Records that `sessionId` runs (`active`) or ended on the provider and applies the rule; PROVIDER_NOT_FOUND when
   * the provider does not exist. Only admins and platform services report sessions. The first report of an end
   * counts it in the machine's reliability, against the machine when `endReason` is its fault (reliability.ts),
   * unless `renterId` is the machine's owner: a rental of one's own machine says nothing about it to others (and
   * would let an owner buy a success record).
   */
  async report(
    actor: Principal,
    providerId: string,
    sessionId: string,
    active: boolean,
    correlationId?: string,
    endReason?: string | null,
    renterId?: string,
  ): Promise<SessionReport> {
    assertMayTrackSessions(actor);
    const recording = this.deps.outbox.recording(active ? 'session_started' : 'session_ended', correlationId);
    const report = await withRetry(
      () =>
        this.deps.db.transaction().execute(async (trx) => {
          const locked = await lockProviderStatus(trx, providerId);
          if (locked === undefined) return undefined;
          const { status: current, owner } = locked;
          const session = await upsertSession(trx, providerId, sessionId, active);
          if (session.endedNow && renterId !== owner) {
            await countSessionEnd(trx, providerId, isProviderFault(endReason));
            await refreshReliability(trx, providerId);
          }
          const now = session.active;
          const move = rentalMove(current, await hasActiveSession(trx, providerId));
          const written = move && (await moveStatus(trx, providerId, move.from, move.to, recording));
          return {
            provider_id: providerId,
            session_id: sessionId,
            active: now,
            previous_status: current,
            status: written ? written.status : current,
          } satisfies SessionReport;
        }),
      this.deps.retry,
    );
    if (!report) throw registryErrors.providerNotFound(providerId);
    if (report.status !== report.previous_status) this.deps.outbox.written();
    return report;
  }
}
