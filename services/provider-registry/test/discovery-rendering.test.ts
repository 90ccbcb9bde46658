/**
 * Discovery pages are rendered as JSON by PostgreSQL (db/provider-json-sql.ts) while
 * GET /providers/{id} serializes in JS: both must show every provider identically.
 */
import { migrateToLatest, openDatabase } from '@gpu/common';
import { createTestDatabase } from '@gpu/common/testing';
import { type Kysely, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrations } from '../src/db/migrations/index.ts';
import { ageProvider, gpu, type Harness, providerBody, register, startHarness } from './helpers.ts';

let h: Harness;

beforeAll(async () => {
  h = await startHarness({ nats: false, config: { heartbeat_interval: '1s', offline_after: '60s' } });
});
afterAll(async () => {
  await h.close();
  await h.testDb.drop();
});

const awkward = 'quote " backslash \\ tab \t newline \n bell \u0007 nul-ish \u001f ü € 😀 </script>';

async function getJson(id: string) {
  const res = await h.app.inject({ method: 'GET', url: `/providers/${id}` });
  expect(res.statusCode).toBe(200);
  return res.json();
}

describe('GET /providers rendering', () => {
  it('shows each provider exactly as GET /providers/{id} does, keys and values alike', async () => {
    const full = await register(h.app, {
      owner_id: `owner ${awkward}`,
      name: `name ${awkward}`,
      location: `location ${awkward}`,
      metadata: {
        [`key ${awkward}`]: awkward,
        nested: { list: [1, 1.5, -0.25, 2 ** 64, 1e21, true, false, null], empty: {} },
        emoji: '😀',
      },
      gpus: [
        gpu({ model_name: `model ${awkward}`, driver_version: 'd "\\ \t\u0001 😀' }),
        gpu({
          model_name: 'NVIDIA H100',
          vram: 81559,
          architecture: null,
          compute_capability: null,
          cuda_cores: null,
          tensor_cores: 0,
          memory_bandwidth: Number.MAX_SAFE_INTEGER,
          power_consumption: 4_294_967_295,
          is_healthy: false,
        }),
      ],
    });
    const minimal = await register(h.app, {
      hostname: undefined,
      ip_address: undefined,
      location: undefined,
      metadata: undefined,
      gpus: [{ model_name: 'RTX 4090', vram: 24564, driver_version: '550' }],
    });
    const silent = await register(h.app, { ip_address: '2001:db8::1' });
    // Metrics (and zeros) as heartbeats store them; a provider silent past the bound shows offline.
    await h.app.inject({
      method: 'POST',
      url: `/providers/${full.id}/heartbeat`,
      payload: {
        gpu_metrics: [
          { index: 0, utilization_gpu: 0, utilization_mem: 100, temperature: 255, power_draw: 0 },
          { index: 1, is_healthy: true },
        ],
      },
    });
    await ageProvider(h.database, silent.id, 600_000);
    // Microsecond timestamps whose milliseconds must be truncated, as JS Dates are, not rounded.
    await sql`UPDATE providers SET registered_at = '2025-03-04 05:06:07.999999+00' WHERE id = ${minimal.id}`.execute(
      h.database.db,
    );
    await sql`UPDATE provider_liveness SET last_seen_at = now() - interval '0.0005 s'
              WHERE provider_id = ${minimal.id}`.execute(h.database.db);

    const res = await h.app.inject({ method: 'GET', url: '/providers?limit=1000' });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('application/json; charset=utf-8');
    const listed = res.json() as { id: string; status: string }[];
    expect(listed).toHaveLength(3);
    for (const item of listed) {
      // Same values, same key order: the list is the same serialization as a single GET.
      expect(JSON.stringify(item)).toBe(JSON.stringify(await getJson(item.id)));
    }
    expect(listed.find((p) => p.id === silent.id)?.status).toBe('offline');
    expect(listed.find((p) => p.id === minimal.id)).toMatchObject({
      registered_at: '2025-03-04T05:06:07.999Z',
      hostname: null,
      location: null,
      metadata: {},
    });
  });

  it('shows GPU specs as a full update left them, and the metrics heartbeats report', async () => {
    const p = await register(h.app, { gpus: [gpu({ model_name: 'A100 40GB', vram: 40960 })] });
    const body = providerBody({
      name: p.name,
      gpus: [gpu({ model_name: `H200 ${awkward}`, vram: 143771, cuda_cores: null }), gpu({ model_name: 'L4' })],
    });
    expect((await h.app.inject({ method: 'PUT', url: `/providers/${p.id}`, payload: body })).statusCode).toBe(200);
    await h.app.inject({
      method: 'POST',
      url: `/providers/${p.id}/heartbeat`,
      payload: { gpu_metrics: [{ index: 1, utilization_gpu: 42, temperature: 61, power_draw: 70, is_healthy: false }] },
    });
    const [listed] = (
      await h.app.inject({ method: 'GET', url: `/providers?gpu_model=${encodeURIComponent('h200')}` })
    ).json() as { id: string }[];
    expect(listed?.id).toBe(p.id);
    expect(JSON.stringify(listed)).toBe(JSON.stringify(await getJson(p.id)));
    expect(listed).toMatchObject({
      gpus: [
        { model_name: `H200 ${awkward}`, vram: 143771, cuda_cores: null },
        { model_name: 'L4', utilization_gpu: 42, temperature: 61, power_draw: 70, is_healthy: false },
      ],
    });
  });

  it('answers an empty page as an empty JSON array', async () => {
    const res = await h.app.inject({ method: 'GET', url: '/providers?gpu_model=no-such-model' });
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe('[]');
    expect(res.headers['x-next-cursor']).toBeUndefined();
    const none = await h.app.inject({ method: 'GET', url: '/providers?status=busy' });
    expect(none.body).toBe('[]');
  });
});

describe('the gpu_spec_json migration', () => {
  it('renders the GPUs that existed before it', async () => {
    const testDb = await createTestDatabase('registry_spec_migration');
    const database = await openDatabase({ url: testDb.url, poolSize: 2 });
    try {
      const db = database.db as Kysely<unknown>;
      const before = Object.fromEntries(Object.entries(migrations).filter(([name]) => name < '20250103'));
      await migrateToLatest(db, 'provider-registry', before);
      const id = '00000000-0000-4000-8000-000000000001';
      await sql`INSERT INTO providers (id, owner_id, name, status) VALUES (${id}, 'o', 'n', 'idle')`.execute(db);
      await sql`INSERT INTO gpus (provider_id, idx, model_name, vram, driver_version, architecture, cuda_cores)
                VALUES (${id}, 0, ${`M "x" ${awkward}`}, 8192, '550.1', NULL, 4096)`.execute(db);
      await migrateToLatest(db, 'provider-registry', migrations);
      const { rows } = await sql<{ spec_json: string }>`SELECT spec_json FROM gpus WHERE provider_id = ${id}`.execute(
        db,
      );
      expect(JSON.parse(`${rows[0]?.spec_json}}`)).toEqual({
        model_name: `M "x" ${awkward}`,
        vram: 8192,
        driver_version: '550.1',
        architecture: null,
        compute_capability: null,
        cuda_cores: 4096,
        tensor_cores: null,
        memory_bandwidth: null,
        power_consumption: null,
      });
    } finally {
      await database.close();
      await testDb.drop();
    }
  });
});
