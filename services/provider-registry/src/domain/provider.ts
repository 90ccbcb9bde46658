/**
 * The provider registry's rules in one place: provider states, what a
 * heartbeat does to a state, which states fall to `offline` when a provider
 * goes silent, and the GPU summary kept on each provider row for discovery.
 */
import type { Gpu, GpuInput } from './gpu-fields.ts';

export const PROVIDER_STATUSES = ['idle', 'busy', 'offline', 'maintenance', 'error'] as const;
export type ProviderStatus = (typeof PROVIDER_STATUSES)[number];

/**
 * The heartbeat rule: a heartbeat brings these states back to `idle` (`busy` while rented: `REVIVED_RENTED_STATUS`);
 * every other state is kept.
 *
 * The rule is applied in the database, in the statement that records the heartbeat (so the state before and after
 * is exact under the row lock, with several instances): `db/sql-rules.ts` renders it to SQL from this list, and
 * nothing else spells it out.
 */
export const REVIVED_BY_HEARTBEAT: readonly ProviderStatus[] = ['offline', 'error'];

/**
 * The state a heartbeat brings a revived provider to: `idle`, or `busy` when a rental session still runs on it (its
 * end has not reached the registry yet: billing ends the sessions of a machine that went offline or into error, and
 * the session's end then brings it to `idle`). A heartbeat never makes a rented machine look free.
 */
export const REVIVED_STATUS: ProviderStatus = 'idle';
export const REVIVED_RENTED_STATUS: ProviderStatus = 'busy';

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
