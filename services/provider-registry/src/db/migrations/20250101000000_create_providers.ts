/**
 * Providers and their GPUs. Frozen: written against Kysely<any> and raw SQL,
 * never the application's current types.
 *
 * The provider row carries a summary of its GPUs (count, largest VRAM, all
 * healthy, model and architecture lists) that the repository keeps in step
 * in the same transaction, so discovery filters and sorts on one table and
 * only looks at `gpus` to confirm per-GPU conditions.
 */
import { type Kysely, sql } from 'kysely';

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE TABLE providers (
      id uuid PRIMARY KEY,
      owner_id text NOT NULL,
      name text NOT NULL,
      hostname text,
      ip_address text,
      status text NOT NULL CHECK (status IN ('idle', 'busy', 'offline', 'maintenance', 'error')),
      location text,
      metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
      registered_at timestamptz NOT NULL DEFAULT now(),
      last_seen_at timestamptz NOT NULL DEFAULT now(),
      gpu_count integer NOT NULL DEFAULT 0,
      max_vram bigint NOT NULL DEFAULT 0,
      all_healthy boolean NOT NULL DEFAULT true,
      gpu_models text NOT NULL DEFAULT '||',
      gpu_architectures text NOT NULL DEFAULT '||',
      CONSTRAINT providers_owner_name_key UNIQUE (owner_id, name)
    )`.execute(db);

  await sql`
    CREATE TABLE gpus (
      provider_id uuid NOT NULL REFERENCES providers (id) ON DELETE CASCADE,
      idx integer NOT NULL CHECK (idx >= 0),
      model_name text NOT NULL,
      vram bigint NOT NULL CHECK (vram >= 0),
      driver_version text NOT NULL,
      architecture text,
      compute_capability text,
      cuda_cores bigint CHECK (cuda_cores BETWEEN 0 AND 4294967295),
      tensor_cores bigint CHECK (tensor_cores BETWEEN 0 AND 4294967295),
      memory_bandwidth bigint CHECK (memory_bandwidth >= 0),
      power_consumption bigint CHECK (power_consumption BETWEEN 0 AND 4294967295),
      utilization_gpu smallint CHECK (utilization_gpu BETWEEN 0 AND 100),
      utilization_mem smallint CHECK (utilization_mem BETWEEN 0 AND 100),
      temperature smallint CHECK (temperature BETWEEN 0 AND 255),
      power_draw bigint CHECK (power_draw BETWEEN 0 AND 4294967295),
      is_healthy boolean NOT NULL DEFAULT true,
      PRIMARY KEY (provider_id, idx)
    )`.execute(db);

  // Each list sort walks one of these in order (forwards or backwards) and stops after a page;
  // the status variants serve the most common filter without scanning other states.
  await sql`CREATE INDEX providers_registered_idx ON providers (registered_at, id)`.execute(db);
  await sql`CREATE INDEX providers_status_registered_idx ON providers (status, registered_at, id)`.execute(db);
  await sql`CREATE INDEX providers_last_seen_idx ON providers (last_seen_at, id)`.execute(db);
  await sql`CREATE INDEX providers_max_vram_idx ON providers (max_vram, id)`.execute(db);
  await sql`CREATE INDEX providers_status_max_vram_idx ON providers (status, max_vram, id)`.execute(db);
  await sql`CREATE INDEX providers_gpu_count_idx ON providers (gpu_count, id)`.execute(db);
}

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function down(db: Kysely<any>): Promise<void> {
  await sql`DROP TABLE gpus`.execute(db);
  await sql`DROP TABLE providers`.execute(db);
}
