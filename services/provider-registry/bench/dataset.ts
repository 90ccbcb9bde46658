/**
 * Loads the benchmark fleet with set-based SQL: providers with their GPU
 * summary columns, then their GPUs (a repeating pattern of 1-8 per provider,
 * 4 on average, 10 models) and model keys, then VACUUM ANALYZE. Every value derives from the
 * provider number, so the summary and the GPU rows agree without a second pass.
 */
import type pg from 'pg';

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

/** The GPUs of provider `i`: rows (g, model, vram, arch, healthy). */
const gpusOf = (i: string) => `
  SELECT g, m.model, m.vram, m.arch, (${hash(i, 'health')} + g) % 50 <> 0 AS healthy
  FROM generate_series(0, (ARRAY[${COUNTS.join(',')}])[1 + ${hash(i, 'count')} % 8] - 1) AS g
  JOIN (VALUES ${MODELS.map((m, k) => `(${k}, '${m[0]}', ${m[1]}, '${m[2]}')`).join(', ')}) AS m(k, model, vram, arch)
    ON m.k = (${hash(i, 'model')} + g / 4) % ${MODELS.length}`;

export async function loadFleet(client: pg.ClientBase, providers: number): Promise<{ gpus: number }> {
  await client.query('BEGIN');
  // Flushed at commit, so the VACUUM below can mark every page all-visible, as autovacuum would have by the
  // time a fleet this size is queried (the test server commits asynchronously, and VACUUM leaves a page
  // unmarked while its rows' commit record is not yet flushed).
  await client.query('SET LOCAL synchronous_commit TO on');
  await client.query(
    `
    INSERT INTO providers (id, owner_id, name, hostname, ip_address, status, location, metadata, registered_at,
                           last_seen_at, gpu_count, max_vram, all_healthy, gpu_models, gpu_architectures)
    SELECT ${uuidOf('i')}, ${uuidOf(`(i % ${OWNERS})`, 'o')}::text, 'rig-' || i, 'rig-' || i || '.example.net',
           '10.' || (i / 65536 % 256) || '.' || (i / 256 % 256) || '.' || (i % 256),
           CASE WHEN ${hash('i', 'status')} % 20 < 12 THEN 'idle' WHEN ${hash('i', 'status')} % 20 < 17 THEN 'busy'
                WHEN ${hash('i', 'status')} % 20 = 17 THEN 'maintenance' WHEN ${hash('i', 'status')} % 20 = 18 THEN 'error'
                ELSE 'offline' END,
           'region-' || (i % 12), jsonb_build_object('rack', 'r' || (i % 40)),
           now() - interval '30 days' + i * interval '1 second', now() - (${hash('i', 'seen')} % 60000) * interval '1 millisecond',
           s.n, s.max_vram, s.healthy, s.models, s.archs
    FROM generate_series(1, $1) AS i
    CROSS JOIN LATERAL (
      SELECT count(*) AS n, max(vram) AS max_vram, bool_and(healthy) AS healthy,
             '|' || string_agg(DISTINCT lower(model), '|') || '|' AS models,
             '|' || string_agg(DISTINCT lower(arch), '|') || '|' AS archs
      FROM (${gpusOf('i')}) AS x) AS s`,
    [providers],
  );
  const { rowCount } = await client.query(
    `
    INSERT INTO gpus (provider_id, idx, model_name, vram, driver_version, architecture, compute_capability,
                      cuda_cores, tensor_cores, memory_bandwidth, power_consumption, utilization_gpu,
                      utilization_mem, temperature, power_draw, is_healthy)
    SELECT ${uuidOf('i')}, x.g, x.model, x.vram, '550.54.15', x.arch, '8.0', 10240, 320, 1000, 350,
           (i * 7 + x.g) % 101, (i * 3 + x.g) % 101, 40 + (i + x.g) % 45, 200 + (i + x.g) % 150, x.healthy
    FROM generate_series(1, $1) AS i
    CROSS JOIN LATERAL (${gpusOf('i')}) AS x`,
    [providers],
  );
  // The discovery keys the repository writes with each registration (see the provider_models migration).
  await client.query(`
    INSERT INTO provider_models (provider_id, model, registered_at, max_vram, gpu_count)
    SELECT DISTINCT p.id, lower(g.model_name), p.registered_at, p.max_vram, p.gpu_count
    FROM providers p JOIN gpus g ON g.provider_id = p.id`);
  await client.query('COMMIT');
  // Every VACUUM before any ANALYZE: an ANALYZE commits (asynchronously) and would hold back the flush
  // position that a following VACUUM checks.
  await client.query('VACUUM providers, gpus, provider_models');
  await client.query('ANALYZE providers, gpus, provider_models');
  return { gpus: rowCount ?? 0 };
}
