/** Kysely table types of the provider registry (the current shape; migrations do not use these). */
import type { OutboxEventTable } from '@gpu/common';
import type { ColumnType, Generated, Insertable, Selectable } from 'kysely';
import type { Gpu } from '../domain/gpu-fields.ts';

type Timestamp = ColumnType<Date, Date | string | undefined, Date | string>;
type Json = ColumnType<Record<string, unknown>, string, string>;

interface ProvidersTable {
  id: string;
  owner_id: string;
  name: string;
  hostname: string | null;
  ip_address: string | null;
  status: string;
  location: string | null;
  metadata: Json;
  registered_at: Timestamp;
  gpu_count: Generated<number>;
  max_vram: Generated<number>;
  all_healthy: Generated<boolean>;
  gpu_models: Generated<string>;
  gpu_architectures: Generated<string>;
  /** When the machine entered its current class of status (up, down, neither): the reliability migration. */
  status_since: Generated<Date>;
  /** The smallest group of GPUs a rental may take on the machine (1-64): the GPU leases migration. */
  min_gpus_per_rental: Generated<number>;
  /** The owner's hold: from an explicit `busy` until an explicit `idle` (the owner hold migration). */
  held: Generated<boolean>;
  /** The daemon client the machine is bound to, null for none (the daemon binding migration). */
  daemon_client_id: ColumnType<string | null, string | null | undefined, string | null>;
  /** The disk each workload gets, MB; null: not stated (the disk migration). */
  disk_mb: ColumnType<number | null, number | null | undefined, number | null>;
}

/**
 * A provider's clock and copies of its status, owner and bound daemon (the liveness migrations): heartbeats read and
 * write this narrow row alone, and the provider row only when the status changes. Triggers create it with the provider
 * and copy every change; its clock is in no index, so that moving it is a heap-only update.
 */
interface ProviderLivenessTable {
  provider_id: string;
  status: string;
  last_seen_at: Timestamp;
  /** A copy of `providers.gpu_models`, kept by a trigger. */
  gpu_models: Generated<string>;
  /** Copies of `providers.owner_id` and `daemon_client_id`, kept by a trigger: who may move the clock. */
  owner_id: string;
  daemon_client_id: string | null;
}

/**
 * A GPU: one column per field of the GPU field list (`domain/gpu-fields.ts`), null where the field is nullable.
 * The driver reads `bigint` columns (the uint32/uint64 fields) as decimal text; `toGpu` turns them into numbers.
 */
interface GpusTable extends Gpu {
  provider_id: string;
  idx: number;
  /** The static fields as the opening of the GPU's API JSON, kept by a trigger (see its migration). */
  spec_json: Generated<string>;
}

/** A provider's GPU model (lowercased) with the provider's static sort keys; see the migration. */
interface ProviderModelsTable {
  provider_id: string;
  model: string;
  registered_at: Timestamp;
  max_vram: number;
  gpu_count: number;
}

/** The GPUs billing holds on a machine, as its newest statement (by `version`) names them (domain/gpu-holds.ts). */
interface GpuHoldsTable {
  provider_id: string;
  version: ColumnType<string, number | string, number | string>;
  /** By index in the provider's `gpus` array. */
  gpu_indices: number[];
  /** The held GPUs interruptible sessions hold: index → bid per GPU-hour. */
  bids: ColumnType<Record<string, string>, string | undefined, string>;
  updated_at: Timestamp;
}

/** A rental session whose end the machine's reliability has counted (so that a redelivered end is counted once). */
interface CountedSessionEndsTable {
  session_id: string;
  provider_id: string;
  counted_at: Timestamp;
}

/** Seconds a machine spent up and down per UTC day (kept by a trigger on status changes). */
interface ProviderUptimeTable {
  provider_id: string;
  day: ColumnType<Date, string, string>;
  up_seconds: number;
  down_seconds: number;
}

/** A machine's ended rental sessions, and those ended by its fault. */
interface ProviderReliabilityTable {
  provider_id: string;
  sessions_ended: Generated<number>;
  sessions_failed: Generated<number>;
}

/** Billing's platform card as the registry holds it (see the offers migration). */
interface PriceCardTable {
  id: number;
  base_rates: unknown;
  vram_rate_per_gb_hour: string;
  power_rate_per_watt_hour: string;
  factors: unknown;
  occurred_at: Timestamp;
  repriced_at: Date | null;
}

/** A machine's GPU group on the market (see the offers migration). */
interface OffersTable {
  provider_id: string;
  model_key: string;
  gpu_model: string;
  model_names: string[];
  gpu_count: number;
  healthy_gpus: Generated<number>;
  free_gpus: Generated<number>;
  /** Healthy GPUs of the group no active session holds (see the GPU leases migration). */
  unrented_gpus: Generated<number>;
  /** The machine's `min_gpus_per_rental`. */
  min_gpus_per_rental: Generated<number>;
  vram_mb: Generated<string>;
  avg_vram_mb: Generated<string>;
  avg_power_w: Generated<string>;
  architecture: string | null;
  driver_version: string;
  driver_version_parts: number[] | null;
  compute_capability: string | null;
  compute_capability_parts: number[] | null;
  region: string | null;
  /** The machine's `disk_mb` (the disk migration). */
  disk_mb: number | null;
  status: string;
  price_per_gpu_hour: Generated<string | null>;
  /** The machine's bid floor (`provider_prices.bid_floor`; null: it takes no bids): the offer bid floor migration. */
  bid_floor: Generated<string | null>;
  reliability: Generated<number>;
  uptime_30d: Generated<number | null>;
  observed_seconds_30d: Generated<number>;
  sessions_ended: Generated<number>;
  sessions_failed: Generated<number>;
}

export interface RegistryDB {
  providers: ProvidersTable;
  provider_liveness: ProviderLivenessTable;
  gpus: GpusTable;
  provider_models: ProviderModelsTable;
  outbox_events: OutboxEventTable;
  gpu_holds: GpuHoldsTable;
  counted_session_ends: CountedSessionEndsTable;
  provider_uptime: ProviderUptimeTable;
  provider_reliability: ProviderReliabilityTable;
  offers: OffersTable;
  price_card: PriceCardTable;
}

/** A GPU as the API reads it (without `spec_json`, which only discovery's rendering uses). */
export type GpuRow = Omit<Selectable<GpusTable>, 'spec_json'>;
export type NewGpuRow = Insertable<GpusTable>;
