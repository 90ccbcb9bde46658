/**
 * The provider registry's rules in one place: provider states, what a
 * heartbeat does to a state, which states fall to `offline` when a provider
 * goes silent, and the GPU summary kept on each provider row for discovery.
 */
import { PROVIDER_STATUSES, type ProviderStatus } from '@gpu/common';
import type { Gpu, GpuInput } from './gpu-fields.ts';

/** The statuses (shared with billing: `market-terms.ts` in @gpu/common). */
export { PROVIDER_STATUSES, type ProviderStatus };

/**
 * The heartbeat rule: a heartbeat brings these states back to `RENTABLE_STATUS` (`idle`), or to `RENTED_STATUS`
 * (`busy`) when the provider is fully rented (its sessions' ends have not reached the registry yet: billing ends the
 * sessions of a machine that went offline or into error, and the sessions' ends then bring it to `idle`), so a
 * heartbeat never makes a fully rented machine look free; every other state is kept.
 *
 * The rule is applied in the database, in the statement that records the heartbeat (so the state before and after
 * is exact under the row lock, with several instances): `db/sql-rules.ts` renders it to SQL from this list, and
 * nothing else spells it out.
 */
export const REVIVED_BY_HEARTBEAT: readonly ProviderStatus[] = ['offline', 'error'];

/**
 * The rental rule (stated in `domain/provider-sessions.ts`): a provider in `RENTABLE_STATUS` goes to `RENTED_STATUS`
 * once it is fully rented (an active session, and no GPU group with `min_gpus_per_rental` free GPUs left), and back
 * when it is no longer; every other state is kept. `db/sql-rules.ts` renders it to SQL.
 */
export const RENTABLE_STATUS: ProviderStatus = 'idle';
export const RENTED_STATUS: ProviderStatus = 'busy';

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
  name: string;
  hostname: string | null;
  ip_address: string | null;
  status: ProviderStatus;
  gpus: Gpu[];
  /** The smallest group of GPUs a rental may take on the machine. */
  min_gpus_per_rental: number;
  location: string | null;
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
  const frame = (xs: string[]) => `|${[...new Set(xs.map((x) => x.toLowerCase()))].sort().join('|')}|`;
  return {
    gpu_count: gpus.length,
    max_vram: gpus.reduce((m, g) => Math.max(m, g.vram), 0),
    all_healthy: gpus.every((g) => g.is_healthy),
    gpu_models: frame(gpus.map((g) => g.model_name)),
    gpu_architectures: frame(gpus.flatMap((g) => (g.architecture ? [g.architecture] : []))),
  } satisfies GpuSummary;
}
