/** Rows to API objects: snake_case keys, RFC 3339 UTC timestamps, GPUs in index order. */
import type { Gpu, GpuInput, Provider, ProviderStatus } from '../domain/provider.ts';
import type { GpuRow, NewGpuRow } from './schema.ts';

export interface ProviderListRow {
  id: string;
  owner_id: string;
  name: string;
  hostname: string | null;
  ip_address: string | null;
  status: ProviderStatus;
  location: string | null;
  metadata: Record<string, unknown> | string | null;
  registered_at: Date | string;
  last_seen_at: Date | string;
}

const iso = (v: Date | string) => (v instanceof Date ? v : new Date(v)).toISOString();

export function toGpu(row: GpuRow): Gpu {
  return {
    model_name: row.model_name,
    vram: Number(row.vram),
    driver_version: row.driver_version,
    architecture: row.architecture,
    compute_capability: row.compute_capability,
    cuda_cores: row.cuda_cores === null ? null : Number(row.cuda_cores),
    tensor_cores: row.tensor_cores === null ? null : Number(row.tensor_cores),
    memory_bandwidth: row.memory_bandwidth === null ? null : Number(row.memory_bandwidth),
    power_consumption: row.power_consumption === null ? null : Number(row.power_consumption),
    utilization_gpu: row.utilization_gpu,
    utilization_mem: row.utilization_mem,
    temperature: row.temperature,
    power_draw: row.power_draw === null ? null : Number(row.power_draw),
    is_healthy: row.is_healthy,
  };
}

export function toProvider(row: ProviderListRow, gpus: GpuRow[]): Provider {
  const metadata = typeof row.metadata === 'string' ? JSON.parse(row.metadata) : (row.metadata ?? {});
  return {
    id: row.id,
    owner_id: row.owner_id,
    name: row.name,
    hostname: row.hostname,
    ip_address: row.ip_address,
    status: row.status,
    gpus: [...gpus].sort((a, b) => a.idx - b.idx).map(toGpu),
    location: row.location,
    registered_at: iso(row.registered_at),
    last_seen_at: iso(row.last_seen_at),
    metadata,
  };
}

/** The GPU rows to insert for a provider's `gpus` array (index = position). */
export function toGpuRows(providerId: string, gpus: GpuInput[]): NewGpuRow[] {
  return gpus.map((g, idx) => ({
    provider_id: providerId,
    idx,
    model_name: g.model_name,
    vram: g.vram,
    driver_version: g.driver_version,
    architecture: g.architecture ?? null,
    compute_capability: g.compute_capability ?? null,
    cuda_cores: g.cuda_cores ?? null,
    tensor_cores: g.tensor_cores ?? null,
    memory_bandwidth: g.memory_bandwidth ?? null,
    power_consumption: g.power_consumption ?? null,
    utilization_gpu: g.utilization_gpu ?? null,
    utilization_mem: g.utilization_mem ?? null,
    temperature: g.temperature ?? null,
    power_draw: g.power_draw ?? null,
    is_healthy: g.is_healthy,
  }));
}
