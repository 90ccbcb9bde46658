/**
 * Which GPUs are free has one owner: billing, whose leases decide it (its `domain/leases/`). The registry does not
 * work it out again: after every change of a machine's leases (a rental's start or end, a reservation made, used,
 * cancelled or lapsed) billing states the machine's held GPUs, with a version that grows with each statement of that
 * machine (over NATS, billing's `lease.held` event; without NATS, billing's call to `PUT /providers/{id}/gpus-held`).
 * The registry keeps the newest statement per machine (`gpu_holds`) and drops an older or repeated one, so
 * redeliveries and reordering are harmless and the market shows billing's leases as soon as the last statement is
 * applied. A lapsed reservation is billing's to state too (its expiry sweep states the machine again at the expiry):
 * the registry keeps no expiries, sweeps nothing and holds no lease of its own.
 *
 * A GPU is **free** when it is healthy and not held. A provider is **fully rented** when billing holds some of its GPUs
 * and none of its GPU groups (its offers: the GPUs of one billing model key) has at least the machine's
 * `min_gpus_per_rental` free GPUs: nothing is left that a rental could take. The rule, applied under the provider's
 * row lock on every statement kept, and when a heartbeat changes a GPU's health or a full update the GPUs or the
 * minimum:
 *
 * - a fully rented provider goes `idle` -> `busy`;
 * - a `busy` provider that is no longer fully rented goes `busy` -> `idle` (an `idle` provider with GPUs held is partly
 *   rented: the rest of its GPUs are on the market), unless its owner holds it (`holdAfterExplicit` in `provider.ts`);
 * - every other state is kept: `offline`, `error` and `maintenance` are the machine's or the operator's word, never
 *   overridden by a rental (a heartbeat that revives an offline machine brings it to `idle`, or `busy` when fully
 *   rented).
 *
 * The states are `RENTABLE_STATUS` and `RENTED_STATUS` of `provider.ts`; the condition is worked out by the database
 * (`db/sql-rules.ts`) from the groups' unrented GPUs it keeps on the offers (definitions.ts), so the market and the
 * status never disagree. A status change goes through the registry's status events (reasons `session_started` when
 * GPUs were taken, `session_ended` when some were given back), recorded with the change.
 *
 * A rental's end is a fact of its own for the machine's reliability (billing's `session.completed` and
 * `session.terminated`, or `PUT /providers/{id}/ended-sessions/{sessionId}`): counted once per session, against the
 * machine when the end was its fault.
 */
import type { Principal, RetryOptions } from '@gpu/common';
import { withRetry } from '@gpu/common';
import type { Kysely } from 'kysely';
import {
  deleteCountedEnds,
  gpuHoldsOf,
  lockProviderStatus,
  markSessionEndCounted,
  storeGpuHolds,
} from '../db/gpu-hold-repository.ts';
import { refreshReliability } from '../db/offer-repository.ts';
import { countSessionEnd } from '../db/reliability-repository.ts';
import type { RegistryDB } from '../db/schema.ts';
import { applyRentalRule } from '../db/status-repository.ts';
import { registryErrors } from '../errors.ts';
import { assertMayTrackSessions } from './access.ts';
import { type ProviderStatus, RENTABLE_STATUS } from './provider.ts';
import { isProviderFault } from './reliability.ts';
import type { StatusOutbox } from './status-events.ts';

/**
 * Whether an explicit status change (PATCH status, a full update, a registration) contradicts the GPUs billing holds:
 *
 * - `idle` is refused while it is fully rented: the machine is its renters' until billing frees GPUs;
 * - `busy` is always allowed: the owner holds the machine off the market, rented or not (`holdAfterExplicit` in
 *   `provider.ts`), and its running sessions go on;
 * - `offline`, `maintenance` and `error` are always allowed, rented or not: the owner takes the machine away, and
 *   billing ends its running sessions billed to the last minute the daemon reported, as for a machine that goes
 *   offline by itself.
 *
 * A new machine has nothing held, so a registration may name any state.
 */
function contradictsHolds(target: ProviderStatus, fullyRented: boolean): boolean {
  return target === RENTABLE_STATUS && fullyRented;
}

/** Throws STATUS_CONTRADICTS_SESSIONS when the change contradicts the GPUs held (`contradictsHolds`). */
export function assertExplicitStatus(providerId: string, target: ProviderStatus, fullyRented: boolean): void {
  if (contradictsHolds(target, fullyRented)) throw registryErrors.statusContradictsSessions(providerId, target);
}

/** Billing's statement of the GPUs it holds on a machine. */
export interface GpuHoldsInput {
  providerId: string;
  /** Grows with each statement of the machine: the greatest wins. */
  version: number;
  /** By index in the provider's `gpus` array; empty: none held. */
  gpuIndices: readonly number[];
  /** The held GPUs interruptible sessions hold: index → bid per GPU-hour (none: on demand all). */
  bids?: Readonly<Record<string, string>>;
  correlationId?: string;
}

/** What a statement did. */
export interface GpuHoldsResult {
  provider_id: string;
  /** Whether this statement is the newest and was kept (false: one as new or newer is kept already). */
  applied: boolean;
  /** The kept statement's version and GPUs. */
  version: number;
  gpu_indices: number[];
  previous_status: ProviderStatus;
  status: ProviderStatus;
}

/** A rental's end, for the machine's reliability. */
export interface SessionEndInput {
  providerId: string;
  sessionId: string;
  /** Billing's end reason: the machine's faults count against its reliability. */
  endReason?: string | null;
  /** The session's renter: a rental by the machine's owner is not counted in its reliability. */
  renterId?: string;
}

export interface GpuHoldsDeps {
  db: Kysely<RegistryDB>;
  outbox: StatusOutbox;
  retry?: RetryOptions;
}

/** Counted ends deleted per statement of a purge. */
const PURGE_BATCH = 10_000;

export class GpuHolds {
  constructor(private readonly deps: GpuHoldsDeps) {}

  /** The GPUs billing holds on the machine as last stated, and the statement's version (0: none stated). */
  of(providerId: string): Promise<{ version: number; gpuIndices: number[] }> {
    return gpuHoldsOf(this.deps.db, providerId);
  }

  /**
   * Keeps billing's statement of the machine's held GPUs if it is the newest and applies the rule; PROVIDER_NOT_FOUND
   * when the provider does not exist. Only admins and platform services state holds.
   */
  async state(actor: Principal, input: GpuHoldsInput): Promise<GpuHoldsResult> {
    assertMayTrackSessions(actor);
    const { providerId } = input;
    const result = await withRetry(
      () =>
        this.deps.db.transaction().execute(async (trx) => {
          const locked = await lockProviderStatus(trx, providerId);
          if (locked === undefined) return undefined;
          const before = await gpuHoldsOf(trx, providerId);
          const kept = await storeGpuHolds(trx, providerId, input.version, input.gpuIndices, input.bids);
          // Taking GPUs can only make the machine busy, giving them back only idle: the reason says which.
          const took = kept.gpuIndices.some((i) => !before.gpuIndices.includes(i));
          const recording = this.deps.outbox.recording(took ? 'session_started' : 'session_ended', input.correlationId);
          const written = kept.applied ? await applyRentalRule(trx, providerId, recording) : undefined;
          return {
            provider_id: providerId,
            applied: kept.applied,
            version: kept.version,
            gpu_indices: kept.gpuIndices,
            previous_status: locked.status,
            status: written ? written.status : locked.status,
          } satisfies GpuHoldsResult;
        }),
      this.deps.retry,
    );
    if (!result) throw registryErrors.providerNotFound(providerId);
    if (result.status !== result.previous_status) this.deps.outbox.written();
    return result;
  }

  /**
   * Counts a rental's end in the machine's reliability, once per session, against the machine when `endReason` is its
   * fault (reliability.ts), unless `renterId` is the machine's owner: a rental of one's own machine says nothing about
   * it to others (and would let an owner buy a success record). Whether this call counted it; PROVIDER_NOT_FOUND when
   * the provider does not exist.
   */
  async countEnd(actor: Principal, input: SessionEndInput): Promise<boolean> {
    assertMayTrackSessions(actor);
    const counted = await withRetry(
      () =>
        this.deps.db.transaction().execute(async (trx) => {
          const locked = await lockProviderStatus(trx, input.providerId);
          if (locked === undefined) return undefined;
          if (input.renterId === locked.owner) return false;
          if (!(await markSessionEndCounted(trx, input.providerId, input.sessionId))) return false;
          await countSessionEnd(trx, input.providerId, isProviderFault(input.endReason));
          await refreshReliability(trx, input.providerId);
          return true;
        }),
      this.deps.retry,
    );
    if (counted === undefined) throw registryErrors.providerNotFound(input.providerId);
    return counted;
  }

  /** Deletes the counted ends older than `retentionMs`, a batch at a time; how many it deleted. */
  async purgeCountedEnds(retentionMs: number, now = new Date()): Promise<number> {
    const before = new Date(now.getTime() - retentionMs);
    let total = 0;
    for (;;) {
      const n = await withRetry(() => deleteCountedEnds(this.deps.db, before, PURGE_BATCH), this.deps.retry);
      total += n;
      if (n < PURGE_BATCH) return total;
    }
  }
}
