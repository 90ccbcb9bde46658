/** Rows to domain values (GPUs in index order, numbers and JSON parsed) and GPU inputs to rows. */
import { GPU_FIELDS, type Gpu, type GpuInput } from '../domain/gpu-fields.ts';
import type { Provider, ProviderStatus } from '../domain/provider.ts';
import type { GpuRow, NewGpuRow } from './schema.ts';

export interface ProviderListRow {
  id: string;
  owner_id: string;
  daemon_client_id: string | null;
  name: string;
  hostname: string | null;
  ip_address: string | null;
  status: ProviderStatus;
  min_gpus_per_rental: number;
  held: boolean;
  location: string | null;
  disk_mb: number | null;
  metadata: Record<string, unknown> | string | null;
  registered_at: Date | string;
  last_seen_at: Date | string;
}

const asDate = (v: Date | string) => (v instanceof Date ? v : new Date(v));

/** The GPU fields whose columns may come back as text (`bigint`) and are turned into numbers. */
const NUMERIC_FIELDS = new Set<string>(
  GPU_FIELDS.filter((f) => f.type !== 'text' && f.type !== 'bool').map((f) => f.name),
);

/** A GPU row as the domain's GPU, its fields in the field list's order. */
function toGpu(row: GpuRow): Gpu {
  const gpu: Record<string, unknown> = {};
  for (const { name } of GPU_FIELDS) {
    const value = row[name];
    gpu[name] = value !== null && NUMERIC_FIELDS.has(name) ? Number(value) : value;
  }
  return gpu as Gpu;
}

export function toProvider(row: ProviderListRow, gpus: GpuRow[]): Provider {
  const metadata = typeof row.metadata === 'string' ? JSON.parse(row.metadata) : (row.metadata ?? {});
  return {
    id: row.id,
    owner_id: row.owner_id,
    daemon_client_id: row.daemon_client_id,
    name: row.name,
    hostname: row.hostname,
    ip_address: row.ip_address,
    status: row.status,
    gpus: [...gpus].sort((a, b) => a.idx - b.idx).map(toGpu),
    min_gpus_per_rental: row.min_gpus_per_rental,
    held: row.held,
    location: row.location,
    disk_mb: row.disk_mb,
    registered_at: asDate(row.registered_at),
    last_seen_at: asDate(row.last_seen_at),
    metadata,
  };
}

/** The GPU rows to insert for a provider's `gpus` array (index = position); left-out fields are null. */
export function toGpuRows(providerId: string, gpus: GpuInput[]): NewGpuRow[] {
  return gpus.map((g, idx) => {
    const row: Record<string, unknown> = { provider_id: providerId, idx };
    for (const { name } of GPU_FIELDS) row[name] = g[name] ?? null;
    return row as unknown as NewGpuRow;
  });
}
