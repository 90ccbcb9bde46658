/**
 * The provider registry's rules in one place: provider states, what a
 * heartbeat does to a state, which states fall to `offline` when a provider
 * goes silent, and the GPU summary kept on each provider row for discovery.
 */
import { PROVIDER_STATUSES, type ProviderStatus } from '@gpu/common';
import { foldCase } from './case-fold.ts';
import type { Gpu, GpuInput } from './gpu-fields.ts';

/** The statuses (shared with billing: `market-terms.ts` in @gpu/common). */
export { PROVIDER_STATUSES, type ProviderStatus };

/**
 * The heartbeat rule: a heartbeat brings these states back to `RENTABLE_STATUS` (`idle`), or to `RENTED_STATUS`
 * (`busy`) when the provider is fully rented (its sessions' ends have not reached the registry yet: billing ends the
 * sessions of a machine that went offline or into error, and the sessions' ends then bring it to `idle`) or held by
 * its owner (`holdAfterExplicit`), so a heartbeat never makes a rented or held machine look free; every other state
 * is kept.
 *
 * The rule is applied in the database, in the statement that records the heartbeat (so the state before and after
 * is exact under the row lock, with several instances): `db/sql-rules.ts` renders it to SQL from this list, and
 * nothing else spells it out.
 */
export const REVIVED_BY_HEARTBEAT: readonly ProviderStatus[] = ['offline', 'error'];

/**
 * The rental rule (stated in `domain/gpu-holds.ts`): a provider in `RENTABLE_STATUS` goes to `RENTED_STATUS`
 * once it is fully rented (an active session, and no GPU group with `min_gpus_per_rental` free GPUs left), and back
 * when it is no longer, unless its owner holds it (`holdAfterExplicit`); every other state is kept.
 * `db/sql-rules.ts` renders it to SQL.
 */
export const RENTABLE_STATUS: ProviderStatus = 'idle';
export const RENTED_STATUS: ProviderStatus = 'busy';

/**
 * The owner's hold. An explicit `busy` (PATCH status, or a full update or a registration naming it; the spec's own
 * example of an explicit change, "to `maintenance` or `busy`") holds the machine off the market, rented or not: it
 * stays `busy` when its sessions end (the rental rule), a heartbeat that revives it from `offline` or `error` brings
 * it back `busy` (the heartbeat rule), no offer lists it, and billing starts no rental on it (the provider's `held`).
 * An explicit `idle` lifts the hold; it is refused while the machine is fully rented (`gpu-holds.ts`), so
 * nobody flips a rented machine to idle. Other explicit states (`offline`, `maintenance`, `error`) keep it: a machine
 * its owner held comes back from an error or a silence still held.
 *
 * Whether the machine is held after an explicit change to `status`; undefined: as it was.
 */
export function holdAfterExplicit(status: ProviderStatus | undefined): boolean | undefined {
  if (status === RENTED_STATUS) return true;
  if (status === RENTABLE_STATUS) return false;
  return undefined;
}

/** The bounds and default of a machine's `min_gpus_per_rental` (a provider has at most 64 GPUs). */
export const MIN_GPUS_PER_RENTAL = { min: 1, max: 64, default: 1 } as const;

/**
 * States that fall to `offline` when the provider has been silent longer than
 * the offline bound. `maintenance` is exempt: it is an operator's decision,
 * and a heartbeat after an automatic `offline` would otherwise turn it into
 * `idle` and hand the machine to the scheduler. Readers see the effective
 * status at once and the offline sweep stores it; both apply this list in SQL
 * (`db/sql-rules.ts`), with the database's clock.
 */
export const AUTO_OFFLINE_FROM: readonly ProviderStatus[] = ['idle', 'busy', 'error'];

/** A provider with its GPUs (in index order) and its effective status; the API's JSON is `wire/provider-json.ts`. */
export interface Provider {
  id: string;
  owner_id: string;
  /** The daemon client the machine is bound to (`domain/access.ts`); null: none. */
  daemon_client_id: string | null;
  name: string;
  hostname: string | null;
  ip_address: string | null;
  status: ProviderStatus;
  gpus: Gpu[];
  /** The smallest group of GPUs a rental may take on the machine. */
  min_gpus_per_rental: number;
  /** Held off the market by its owner (`holdAfterExplicit`). */
  held: boolean;
  location: string | null;
  /** The disk each workload on the machine gets (MB); null: not stated. */
  disk_mb: number | null;
  registered_at: Date;
  last_seen_at: Date;
  metadata: Record<string, unknown>;
}

/** The writable part of a provider (registration and full update). */
export interface ProviderInput {
  owner_id: string;
  name: string;
  hostname?: string | null;
  ip_address?: string | null;
  status?: ProviderStatus;
  location?: string | null;
  metadata?: Record<string, unknown>;
  /** Absent: `MIN_GPUS_PER_RENTAL.default` on registration, the stored value on a full update. */
  min_gpus_per_rental?: number;
  /** Absent: none on registration, the stored value on a full update; null: not stated. */
  disk_mb?: number | null;
  gpus: GpuInput[];
}

/**
 * Aggregates stored on the provider row so discovery can filter and sort
 * without touching the GPU table for most rows. Model and architecture lists
 * are lowercased and framed by `|` (`|nvidia a100|nvidia h100|`).
 */
interface GpuSummary {
  gpu_count: number;
  max_vram: number;
  all_healthy: boolean;
  gpu_models: string;
  gpu_architectures: string;
}

export function summarizeGpus(gpus: readonly GpuInput[]) {
  const frame = (xs: string[]) => `|${[...new Set(xs.map(foldCase))].sort().join('|')}|`;
  return {
    gpu_count: gpus.length,
    max_vram: gpus.reduce((m, g) => Math.max(m, g.vram), 0),
    all_healthy: gpus.every((g) => g.is_healthy),
    gpu_models: frame(gpus.map((g) => g.model_name)),
    gpu_architectures: frame(gpus.flatMap((g) => (g.architecture ? [g.architecture] : []))),
  } satisfies GpuSummary;
}
