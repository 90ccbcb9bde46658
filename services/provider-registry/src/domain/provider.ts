/**
 * The provider registry's rules in one place: provider states, what a
 * heartbeat does to a state, which states fall to `offline` when a provider
 * goes silent, and the GPU summary kept on each provider row for discovery.
 */

export const PROVIDER_STATUSES = ['idle', 'busy', 'offline', 'maintenance', 'error'] as const;
export type ProviderStatus = (typeof PROVIDER_STATUSES)[number];

/** A heartbeat brings these states back to `idle`; every other state is kept. */
export const REVIVED_BY_HEARTBEAT: readonly ProviderStatus[] = ['offline', 'error'];

/**
 * States that fall to `offline` when the provider has been silent longer than
 * the offline bound. `maintenance` is exempt: it is an operator's decision,
 * and a heartbeat after an automatic `offline` would otherwise turn it into
 * `idle` and hand the machine to the scheduler.
 */
export const AUTO_OFFLINE_FROM: readonly ProviderStatus[] = ['idle', 'busy', 'error'];

/** The state after a heartbeat (the repository applies the same rule in SQL, atomically). */
export function statusAfterHeartbeat(current: ProviderStatus): ProviderStatus {
  return REVIVED_BY_HEARTBEAT.includes(current) ? 'idle' : current;
}

/** Static description and current metrics of one GPU, as the API shows it. */
export interface Gpu {
  model_name: string;
  vram: number;
  driver_version: string;
  architecture: string | null;
  compute_capability: string | null;
  cuda_cores: number | null;
  tensor_cores: number | null;
  memory_bandwidth: number | null;
  power_consumption: number | null;
  utilization_gpu: number | null;
  utilization_mem: number | null;
  temperature: number | null;
  power_draw: number | null;
  is_healthy: boolean;
}

/** A GPU as written by registration or full update: optional fields may be left out. */
export type GpuInput = Pick<Gpu, 'model_name' | 'vram' | 'driver_version' | 'is_healthy'> &
  Partial<Omit<Gpu, 'model_name' | 'vram' | 'driver_version' | 'is_healthy'>>;

/** A provider as the API shows it. */
export interface Provider {
  id: string;
  owner_id: string;
  name: string;
  hostname: string | null;
  ip_address: string | null;
  status: ProviderStatus;
  gpus: Gpu[];
  location: string | null;
  registered_at: string;
  last_seen_at: string;
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

/** Metrics a heartbeat reports for the GPU at `index` (its position in the provider's `gpus`). */
export interface GpuMetrics {
  index: number;
  utilization_gpu?: number;
  utilization_mem?: number;
  temperature?: number;
  power_draw?: number;
  is_healthy?: boolean;
}

/**
 * Aggregates stored on the provider row so discovery can filter and sort
 * without touching the GPU table for most rows. Model and architecture lists
 * are lowercased and framed by `|` (`|nvidia a100|nvidia h100|`).
 */
export interface GpuSummary {
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

/** Why a provider's status changed; carried on the status event. */
export type StatusChangeReason = 'registered' | 'explicit' | 'update' | 'heartbeat' | 'offline_timeout';

export interface StatusChange {
  provider_id: string;
  owner_id: string;
  previous_status: ProviderStatus | null;
  status: ProviderStatus;
  reason: StatusChangeReason;
  occurred_at: string;
}
