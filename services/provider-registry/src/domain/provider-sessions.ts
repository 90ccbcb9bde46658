/**
 * Rented providers are `busy`, partly rented ones stay `idle`. A rental takes some of a machine's GPUs (billing's
 * per-GPU leases): the registry keeps the rental sessions billing reports for each provider (billing's session events
 * over NATS JetStream, or billing's calls to `PUT`/`DELETE /providers/{id}/sessions/{sessionId}` when it runs without
 * NATS), each with the GPUs it holds, by index (none named: every GPU of the machine). Billing's reservations (GPUs the
 * scheduler holds for one renter for a short time) are leases too, reported the same way with kind `reservation` and
 * their expiry (over NATS: billing's `lease.reserved`/`lease.released` events): they hold their GPUs until billing
 * releases them or they expire (the offline sweep ends them: `expireReservations`), and their end never counts in
 * the machine's reliability.
 *
 * A GPU is **free** when it is healthy and no active session or reservation holds it. A provider is **fully rented** when at least
 * one session of it is active and none of its GPU groups (its offers: the GPUs of one billing model key) has at least
 * the machine's `min_gpus_per_rental` free GPUs: nothing is left that a rental could take. The rule, applied under the
 * provider's row lock on every session report (start and end), and when a heartbeat changes a GPU's health or a full
 * update the GPUs or the minimum:
 *
 * - a fully rented provider goes `idle` -> `busy`;
 * - a `busy` provider that is no longer fully rented goes `busy` -> `idle` (an `idle` provider with sessions is partly
 *   rented: the rest of its GPUs are on the market), unless its owner holds it (`holdAfterExplicit` in `provider.ts`);
 * - every other state is kept: `offline`, `error` and `maintenance` are the machine's or the operator's word, never
 *   overridden by a rental (a heartbeat that revives an offline machine brings it to `idle`, or `busy` when fully
 *   rented).
 *
 * The states are `RENTABLE_STATUS` and `RENTED_STATUS` of `provider.ts`; the condition is worked out by the database
 * (`db/sql-rules.ts`), from the groups' unrented GPUs it keeps on the offers as sessions, GPU health and the minimum
 * change (the GPU leases migration), so the market and the status never disagree.
 *
 * Applying a report twice, or reports out of order, is harmless: a session's row is a set membership, and an ended
 * session is kept as an ended marker, so a late "started" never brings it back. A running session's report that names
 * GPUs restates them (the latest named set is kept). A status change goes through the registry's status events
 * (reasons `session_started`, `session_ended`), recorded with the change.
 */
import type { LeaseKind, Principal, RetryOptions } from '@gpu/common';
import { withRetry } from '@gpu/common';
import type { Kysely } from 'kysely';
import { refreshReliability } from '../db/offer-repository.ts';
import { countSessionEnd } from '../db/reliability-repository.ts';
import type { RegistryDB } from '../db/schema.ts';
import {
  deleteEndedSessions,
  endExpiredLeases,
  lockProviderStatus,
  machinesWithExpiredLeases,
  upsertSession,
} from '../db/session-repository.ts';
import { applyRentalRule } from '../db/status-repository.ts';
import { registryErrors } from '../errors.ts';
import { assertMayTrackSessions } from './access.ts';
import { type ProviderStatus, RENTABLE_STATUS } from './provider.ts';
import { isProviderFault } from './reliability.ts';
import type { StatusOutbox } from './status-events.ts';

/** The GPUs a session holds, by index in index order; null: every GPU of the machine. */
export type GpuSet = readonly number[] | null;

/**
 * Whether an explicit status change (PATCH status, a full update, a registration) contradicts the provider's rental
 * sessions:
 *
 * - `idle` is refused while it is fully rented: the machine is its renters' until billing ends a session;
 * - `busy` is always allowed: the owner holds the machine off the market, rented or not (`holdAfterExplicit` in
 *   `provider.ts`), and its running sessions go on;
 * - `offline`, `maintenance` and `error` are always allowed, rented or not: the owner takes the machine away, and
 *   billing ends its running sessions billed to the last minute the daemon reported, as for a machine that goes
 *   offline by itself.
 *
 * A new machine has no session, so a registration may name any state.
 */
function contradictsSessions(target: ProviderStatus, fullyRented: boolean): boolean {
  return target === RENTABLE_STATUS && fullyRented;
}

/** Throws STATUS_CONTRADICTS_SESSIONS when the change contradicts the sessions (`contradictsSessions`). */
export function assertExplicitStatus(providerId: string, target: ProviderStatus, fullyRented: boolean): void {
  if (contradictsSessions(target, fullyRented)) throw registryErrors.statusContradictsSessions(providerId, target);
}

/** A session report: billing says the session (or reservation: `kind`) runs (holding `gpuIndices`) or ended. */
export interface SessionReportInput {
  providerId: string;
  sessionId: string;
  active: boolean;
  /** A rental `session` (the default) or a `reservation`, which ends by itself at `expiresAt` and is never counted. */
  kind?: LeaseKind;
  /** When a reservation ends by itself (required for one). */
  expiresAt?: Date | null;
  /** The GPUs the session holds (a running session's report); null or absent: every GPU, or those held already. */
  gpuIndices?: GpuSet;
  correlationId?: string;
  /** Billing's end reason (an end): the machine's faults count against its reliability. */
  endReason?: string | null;
  /** The session's renter (an end): a rental by the machine's owner is not counted in its reliability. */
  renterId?: string;
}

/** What a session report did. */
export interface SessionReport {
  provider_id: string;
  session_id: string;
  /** Whether the session is active now (false once it ended, whatever was reported after). */
  active: boolean;
  /** The kind of lease, as first reported. */
  kind: LeaseKind;
  /** The GPUs it holds, as the registry keeps them; null: every GPU of the machine. */
  gpu_indices: GpuSet;
  previous_status: ProviderStatus;
  status: ProviderStatus;
}

export interface ProviderSessionsDeps {
  db: Kysely<RegistryDB>;
  outbox: StatusOutbox;
  retry?: RetryOptions;
}

/** Ended sessions deleted per statement of a purge. */
const PURGE_BATCH = 10_000;
/** Machines whose expired reservations one sweep ends, at most. */
const EXPIRY_BATCH = 1_000;

export class ProviderSessions {
  constructor(private readonly deps: ProviderSessionsDeps) {}

  /** Deletes the sessions that ended more than `retentionMs` ago, a batch at a time; how many it deleted. */
  async purgeEnded(retentionMs: number, now = new Date()): Promise<number> {
    const before = new Date(now.getTime() - retentionMs);
    let total = 0;
    for (;;) {
      const n = await withRetry(() => deleteEndedSessions(this.deps.db, before, PURGE_BATCH), this.deps.retry);
      total += n;
      if (n < PURGE_BATCH) return total;
    }
  }

  /**
   * Ends the reservations past their expiry, a machine at a time under its lock, applying the rental rule (a machine
   * a reservation had made busy goes idle, reason `session_ended`): their GPUs are on the market again. Run by the
   * offline sweep; how many reservations it ended.
   */
  async expireReservations(): Promise<number> {
    const machines = await withRetry(() => machinesWithExpiredLeases(this.deps.db, EXPIRY_BATCH), this.deps.retry);
    let ended = 0;
    for (const providerId of machines) {
      const recording = this.deps.outbox.recording('session_ended');
      const done = await withRetry(
        () =>
          this.deps.db.transaction().execute(async (trx) => {
            if ((await lockProviderStatus(trx, providerId)) === undefined) return { n: 0, written: undefined };
            const n = await endExpiredLeases(trx, providerId);
            return { n, written: await applyRentalRule(trx, providerId, recording) };
          }),
        this.deps.retry,
      );
      ended += done.n;
      if (done.written) this.deps.outbox.written();
    }
    return ended;
  }

  /**
   * Records that the session runs (holding its GPUs) or ended on the provider and applies the rule; PROVIDER_NOT_FOUND
   * when the provider does not exist. Only admins and platform services report sessions. The first report of an end
   * counts it in the machine's reliability, against the machine when `endReason` is its fault (reliability.ts),
   * unless `renterId` is the machine's owner: a rental of one's own machine says nothing about it to others (and
   * would let an owner buy a success record).
   */
  async report(actor: Principal, input: SessionReportInput): Promise<SessionReport> {
    assertMayTrackSessions(actor);
    const { providerId, sessionId, active } = input;
    const recording = this.deps.outbox.recording(active ? 'session_started' : 'session_ended', input.correlationId);
    const report = await withRetry(
      () =>
        this.deps.db.transaction().execute(async (trx) => {
          const locked = await lockProviderStatus(trx, providerId);
          if (locked === undefined) return undefined;
          const { status: current, owner } = locked;
          const session = await upsertSession(trx, providerId, sessionId, active, input.gpuIndices ?? null, {
            kind: input.kind ?? 'session',
            expiresAt: input.expiresAt ?? null,
          });
          if (session.endedNow && session.kind === 'session' && input.renterId !== owner) {
            await countSessionEnd(trx, providerId, isProviderFault(input.endReason));
            await refreshReliability(trx, providerId);
          }
          const written = await applyRentalRule(trx, providerId, recording);
          return {
            provider_id: providerId,
            session_id: sessionId,
            active: session.active,
            kind: session.kind,
            gpu_indices: session.gpuIndices,
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
