/**
 * Loads the benchmark fleet with set-based SQL: providers with their GPU
 * summary columns and their liveness rows (clock and status copy), their GPUs (a repeating pattern of 1-8 per provider, 4 on
 * average, 10 models) and model keys, with the tables' indexes and keys built
 * after the rows (`deferred-indexes.ts`), then VACUUM ANALYZE. Every value
 * derives from the provider number `i`: a provider's GPUs are models
 * `(m + g / 4) % 10` for GPU `g` (one model, or two from the fifth GPU on), so
 * its summary is computed from its one or two models, without aggregating its
 * GPU rows.
 *
 * The market too: billing's price card (the platform's table of the contract) and one offer per provider and GPU model,
 * priced as `offer_price` prices them (no provider has rates of its own here), with free GPUs by the provider's status
 * and its GPUs' health, and a reliability from 0.8 to 1 (a hash) so that sorting and filtering by it choose.
 *
 * Sized for a million providers and four million GPUs: each provider's hashes are
 * computed once (a temporary table), and each GPU's static JSON (`spec_json`, one
 * text per model here) is rendered once per model by the schema's own trigger
 * function rather than once per row (the trigger on `gpus` is off for the load).
 */
import {
  DEFAULT_BASE_RATES,
  DEFAULT_POWER_RATE_PER_WATT_HOUR,
  DEFAULT_VRAM_RATE_PER_GB_HOUR,
  gpuModelKey,
} from '@gpu/common';
import type pg from 'pg';
import { withDeferredIndexes } from './deferred-indexes.ts';

/** Model, VRAM (MB), architecture. */
export const MODELS: [string, number, string][] = [
  ['NVIDIA GeForce RTX 4090', 24564, 'Ada'],
  ['NVIDIA GeForce RTX 4080', 16376, 'Ada'],
  ['NVIDIA GeForce RTX 3090', 24576, 'Ampere'],
  ['NVIDIA A100-SXM4-40GB', 40960, 'Ampere'],
  ['NVIDIA A100-SXM4-80GB', 81920, 'Ampere'],
  ['NVIDIA H100 80GB HBM3', 81559, 'Hopper'],
  ['NVIDIA L40S', 46068, 'Ada'],
  ['NVIDIA Tesla V100', 32768, 'Volta'],
  ['AMD Instinct MI250X', 131072, 'CDNA2'],
  ['AMD Radeon RX 7900 XTX', 24560, 'RDNA3'],
];

/** GPUs per provider, cycling: 32 GPUs per 8 providers. */
const COUNTS = [1, 2, 4, 8, 4, 2, 4, 7];

/** A deterministic pseudo-random number in [0, 2^32) for provider `i` and a salt; independent per salt. */
const hash = (i: string, salt: string) => `('x' || substr(md5('${salt}' || ${i}), 1, 8))::bit(32)::bigint`;

/** A deterministic version-4 UUID for provider number `i` (or, with salt 'o', for owner number `i`). */
const uuidOf = (i: string, salt = 'p') =>
  `overlay(overlay(md5('${salt}' || ${i}) placing '4' from 13) placing '8' from 17)::uuid`;

/** Owners of the fleet: provider `i` belongs to owner `i % OWNERS`, named by a user ID (a UUID, as tokens name users). */
export const OWNERS = 5000;

const text = (s: string) => `'${s.replace(/'/g, "''")}'`;

/**
 * Temporary tables of the load: `bench_models` (k, model, vram, arch, their lowercase forms, and `spec_json` as the
 * schema's trigger function renders it for a GPU of the model), and `bench_fleet`, one row per provider number with
 * its ID and hashes.
 */
async function createFleet(client: pg.ClientBase, providers: number): Promise<void> {
  await client.query(`CREATE TEMP TABLE bench_gpu_specs (LIKE gpus INCLUDING DEFAULTS) ON COMMIT DROP`);
  await client.query(`CREATE TRIGGER bench_gpu_specs_json BEFORE INSERT ON bench_gpu_specs
                      FOR EACH ROW EXECUTE FUNCTION gpu_spec_json()`);
  await client.query(`
    INSERT INTO bench_gpu_specs (provider_id, idx, model_name, vram, driver_version, architecture, compute_capability,
                                 cuda_cores, tensor_cores, memory_bandwidth, power_consumption)
    SELECT gen_random_uuid(), k, model, vram, '550.54.15', arch, '8.0', 10240, 320, 1000, 350
    FROM (VALUES ${MODELS.map((m, k) => `(${k}, ${text(m[0])}, ${m[1]}, ${text(m[2])})`).join(', ')}) AS m(k, model, vram, arch)`);
  await client.query(`
    CREATE TEMP TABLE bench_models ON COMMIT DROP AS
    SELECT idx AS k, model_name AS model, vram, architecture AS arch, lower(model_name) AS lmodel,
           lower(architecture) AS larch, spec_json, m.mkey
    FROM bench_gpu_specs
    JOIN (VALUES ${MODELS.map((m, k) => `(${k}, ${text(gpuModelKey(m[0]))})`).join(', ')}) AS m(k, mkey) ON m.k = idx`);
  await client.query(
    `
    CREATE TEMP TABLE bench_fleet ON COMMIT DROP AS
    SELECT i, ${uuidOf('i')} AS id, ${hash('i', 'status')} % 20 AS slot,
           (ARRAY[${COUNTS.join(',')}])[1 + ${hash('i', 'count')} % 8] AS n,
           ${hash('i', 'model')} % ${MODELS.length} AS m, ${hash('i', 'health')} AS health, ${hash('i', 'seen')} AS seen
    FROM generate_series(1, $1) AS i`,
    [providers],
  );
}

/** The fleet's rows (providers, GPUs, model keys); returns the number of GPUs. */
async function insertRows(client: pg.ClientBase, providers: number): Promise<number> {
  await createFleet(client, providers);
  // A provider has model m for GPUs 0-3 and model m + 1 (another one) for GPUs 4-7; GPU g is unhealthy when
  // (health + g) % 50 = 0, so all are healthy when the first such g, (50 - health % 50) % 50, is past the last GPU.
  // Each provider's narrow liveness row (its clock and its copies) is written below, set-based, rather than by the
  // trigger that creates it with each registration.
  await client.query('ALTER TABLE providers DISABLE TRIGGER providers_liveness_insert');
  await client.query(`
    INSERT INTO providers (id, owner_id, name, hostname, ip_address, status, location, metadata, registered_at,
                           gpu_count, max_vram, all_healthy, gpu_models, gpu_architectures)
    SELECT f.id, ${uuidOf(`(f.i % ${OWNERS})`, 'o')}::text, 'rig-' || f.i, 'rig-' || f.i || '.example.net',
           '10.' || (f.i / 65536 % 256) || '.' || (f.i / 256 % 256) || '.' || (f.i % 256),
           CASE WHEN f.slot < 12 THEN 'idle' WHEN f.slot < 17 THEN 'busy' WHEN f.slot = 17 THEN 'maintenance'
                WHEN f.slot = 18 THEN 'error' ELSE 'offline' END,
           'region-' || (f.i % 12), jsonb_build_object('rack', 'r' || (f.i % 40)),
           now() - interval '30 days' + f.i * interval '1 second', f.n, greatest(a.vram, b.vram), (50 - f.health % 50) % 50 >= f.n,
           CASE WHEN b.k IS NULL THEN '|' || a.lmodel || '|'
                ELSE '|' || least(a.lmodel, b.lmodel) || '|' || greatest(a.lmodel, b.lmodel) || '|' END,
           CASE WHEN b.k IS NULL OR a.larch = b.larch THEN '|' || a.larch || '|'
                ELSE '|' || least(a.larch, b.larch) || '|' || greatest(a.larch, b.larch) || '|' END
    FROM bench_fleet f
    JOIN bench_models a ON a.k = f.m
    LEFT JOIN bench_models b ON f.n > 4 AND b.k = (f.m + 1) % ${MODELS.length}`);
  await client.query('ALTER TABLE providers ENABLE TRIGGER providers_liveness_insert');
  await client.query(`
    INSERT INTO provider_liveness (provider_id, status, last_seen_at, gpu_models, owner_id, daemon_client_id)
    SELECT p.id, p.status, now() - (f.seen % 60000) * interval '1 millisecond', p.gpu_models, p.owner_id,
           p.daemon_client_id
    FROM bench_fleet f JOIN providers p ON p.id = f.id`);
  await client.query('ALTER TABLE gpus DISABLE TRIGGER gpus_spec_json');
  const { rowCount } = await client.query(`
    INSERT INTO gpus (provider_id, idx, model_name, vram, driver_version, architecture, compute_capability,
                      cuda_cores, tensor_cores, memory_bandwidth, power_consumption, utilization_gpu,
                      utilization_mem, temperature, power_draw, is_healthy, spec_json)
    SELECT f.id, g, m.model, m.vram, '550.54.15', m.arch, '8.0', 10240, 320, 1000, 350,
           (f.i * 7 + g) % 101, (f.i * 3 + g) % 101, 40 + (f.i + g) % 45, 200 + (f.i + g) % 150,
           (f.health + g) % 50 <> 0, m.spec_json
    FROM bench_fleet f
    CROSS JOIN LATERAL generate_series(0, f.n - 1) AS g
    JOIN bench_models m ON m.k = (f.m + g / 4) % ${MODELS.length}`);
  await client.query('ALTER TABLE gpus ENABLE TRIGGER gpus_spec_json');
  // The discovery keys the repository writes with each registration (see the provider_models migration).
  await client.query(`
    INSERT INTO provider_models (provider_id, model, registered_at, max_vram, gpu_count)
    SELECT p.id, m.lmodel, p.registered_at, p.max_vram, p.gpu_count
    FROM bench_fleet f
    JOIN providers p ON p.id = f.id
    CROSS JOIN LATERAL generate_series(0, (f.n - 1) / 4) AS b
    JOIN bench_models m ON m.k = (f.m + b) % ${MODELS.length}`);
  // The market: billing's card (the platform's shipped rates, as billing publishes them unless configured otherwise),
  // then each provider's GPU groups priced by it (offer_price's formula: no provider here has rates of its own). The
  // card is marked applied (`repriced_at`), as a registry marks it once every offer carries its prices: left unmarked,
  // the service would walk the million offers repricing them from its start (a minute of PostgreSQL's CPU, during the
  // measurements), as it does to finish the walk of a card an instance left unfinished.
  await client.query(
    `INSERT INTO price_card (id, base_rates, vram_rate_per_gb_hour, power_rate_per_watt_hour, occurred_at, repriced_at)
     VALUES (1, $1::jsonb, $2::numeric, $3::numeric, now(), now())`,
    [JSON.stringify(DEFAULT_BASE_RATES), DEFAULT_VRAM_RATE_PER_GB_HOUR, DEFAULT_POWER_RATE_PER_WATT_HOUR],
  );
  // No machine has rates of its own yet (those that take bids get them below, their floors copied set-based): the
  // trigger that gives a new offer its machine's bid floor (a lookup a row) would find none.
  await client.query('ALTER TABLE offers DISABLE TRIGGER offers_bid_floor');
  await client.query(`
    INSERT INTO offers (provider_id, gpu_model, model_names, model_key, gpu_count, healthy_gpus, unrented_gpus,
                        free_gpus, vram_mb, avg_vram_mb, avg_power_w, architecture, driver_version,
                        driver_version_parts, compute_capability, compute_capability_parts, region, status,
                        price_per_gpu_hour, reliability, uptime_30d, observed_seconds_30d, sessions_ended,
                        sessions_failed)
    SELECT o.provider_id, o.names[1], o.names, o.mkey, o.n, o.healthy, o.healthy,
           CASE WHEN o.status = 'idle' THEN o.healthy ELSE 0 END, o.vram, o.avg_vram, o.avg_power, o.arch,
           '550.54.15', '{550,54,15}', '8.0', '{8,0}', o.location, o.status,
           (coalesce(c.base_rates ->> o.mkey, c.base_rates ->> 'default')::numeric
             + o.avg_vram / 1024 * c.vram_rate_per_gb_hour + o.avg_power * c.power_rate_per_watt_hour),
           0.8 + (${hash('o.i', 'reliability')} % 2001) / 10000.0, 0.8 + (${hash('o.i', 'reliability')} % 2001) / 10000.0,
           2592000, 40, 0
    FROM (
      -- As offers_refresh_gpus aggregates: by model key, VRAM and power over the healthy GPUs (no session holds any:
      -- every healthy GPU is unrented).
      SELECT f.i, g.provider_id, m.mkey, min(m.arch) AS arch, p.status, p.location,
             array_agg(DISTINCT g.model_name ORDER BY g.model_name) AS names, count(*)::int AS n,
             (count(*) FILTER (WHERE g.is_healthy))::int AS healthy,
             coalesce(min(g.vram) FILTER (WHERE g.is_healthy), min(g.vram)) AS vram,
             coalesce(sum(g.vram) FILTER (WHERE g.is_healthy)::numeric / nullif(count(*) FILTER (WHERE g.is_healthy), 0), 0)
               AS avg_vram,
             coalesce(sum(g.power_consumption) FILTER (WHERE g.is_healthy)::numeric
               / nullif(count(*) FILTER (WHERE g.is_healthy), 0), 0) AS avg_power
      FROM bench_fleet f
      JOIN providers p ON p.id = f.id
      JOIN gpus g ON g.provider_id = f.id
      JOIN bench_models m ON m.model = g.model_name
      GROUP BY f.i, g.provider_id, m.mkey, p.status, p.location
    ) o
    CROSS JOIN price_card c`);
  await client.query('ALTER TABLE offers ENABLE TRIGGER offers_bid_floor');
  // One machine in ten takes bids (interruptible rentals), at a floor of 0.50-3.49 per GPU-hour, its other rates the
  // platform's (its offers' prices as above); the floors copied onto its offers set-based, as the trigger on the
  // rates copies each.
  await client.query('ALTER TABLE provider_prices DISABLE TRIGGER provider_prices_offer_bid_floor');
  await client.query(`
    INSERT INTO provider_prices (provider_id, base_rates, bid_floor, occurred_at)
    SELECT f.id, '{}', 0.5 + (${hash('f.i', 'bid')} % 300) / 100.0, now()
    FROM bench_fleet f WHERE ${hash('f.i', 'bids')} % 10 = 0`);
  await client.query('ALTER TABLE provider_prices ENABLE TRIGGER provider_prices_offer_bid_floor');
  await client.query(`
    UPDATE offers o SET bid_floor = pp.bid_floor FROM provider_prices pp WHERE pp.provider_id = o.provider_id`);
  return rowCount ?? 0;
}

/** Seconds each phase of the load took. */
export interface LoadPhases {
  rows: number;
  indexes: number;
  vacuumAnalyze: number;
}

export async function loadFleet(
  client: pg.ClientBase,
  providers: number,
): Promise<{ gpus: number; phases: LoadPhases }> {
  const started = performance.now();
  let rowsDone = 0;
  await client.query('BEGIN');
  // Flushed at commit, so the VACUUM below can mark every page all-visible, as autovacuum would have by the
  // time a fleet this size is queried (the test server commits asynchronously, and VACUUM leaves a page
  // unmarked while its rows' commit record is not yet flushed).
  await client.query('SET LOCAL synchronous_commit TO on');
  // Room for each index build's sort in memory (the largest, the GPUs' key, sorts four million rows at 1M).
  await client.query(`SET LOCAL maintenance_work_mem TO '512MB'`);
  const gpus = await withDeferredIndexes(
    client,
    ['providers', 'provider_liveness', 'gpus', 'provider_models', 'offers'],
    async () => {
      const n = await insertRows(client, providers);
      rowsDone = performance.now();
      return n;
    },
  );
  await client.query('COMMIT');
  const committed = performance.now();
  // Every VACUUM before any ANALYZE: an ANALYZE commits (asynchronously) and would hold back the flush
  // position that a following VACUUM checks.
  await client.query('VACUUM providers, provider_liveness, gpus, provider_models, offers');
  await client.query('ANALYZE providers, provider_liveness, gpus, provider_models, offers');
  const s = (from: number, to: number) => (to - from) / 1000;
  return {
    gpus,
    phases: {
      rows: s(started, rowsDone),
      indexes: s(rowsDone, committed),
      vacuumAnalyze: s(committed, performance.now()),
    },
  };
}
