/**
 * The provider's wire shape is written once (`wire/provider-json.ts`), and two serializers derive from it: the
 * presenter (`providerJson`, for single providers) and the SQL renderer (`db/provider-json-sql.ts`, for discovery
 * pages). From the same rows both must write the same JSON: a provider with GPUs, one without, one with nulls.
 */
import { randomUUID } from 'node:crypto';
import { type Database, openDatabase } from '@gpu/common';
import { createTestDatabase, type TestDatabase } from '@gpu/common/testing';
import { type Kysely, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listProviders } from '../src/db/discovery-repository.ts';
import { migrateRegistry } from '../src/db/migrate.ts';
import { findProvider, insertProvider } from '../src/db/provider-repository.ts';
import type { RegistryDB } from '../src/db/schema.ts';
import type { ProviderInput } from '../src/domain/provider.ts';
import { PROVIDER_FIELDS, providerJson } from '../src/wire/provider-json.ts';
import { gpu } from './helpers.ts';

const OFFLINE_AFTER_MS = 60_000;
let testDb: TestDatabase;
let database: Database<RegistryDB>;
let db: Kysely<RegistryDB>;

beforeAll(async () => {
  testDb = await createTestDatabase('registry_provider_json');
  database = await openDatabase<RegistryDB>({ url: testDb.url, poolSize: 2 });
  db = database.db;
  await migrateRegistry(db as Kysely<unknown>);
});
afterAll(async () => {
  await database?.close();
  await testDb?.drop();
});

const awkward = 'quote " backslash \\ tab \t newline \n bell \u0007 ü € 😀 </script>';

async function insert(owner: string, over: Partial<ProviderInput>): Promise<string> {
  const id = randomUUID();
  await insertProvider(db, id, { owner_id: owner, name: `rig ${awkward} ${id}`, gpus: [], ...over }, null);
  return id;
}

describe('the provider presenter and the SQL renderer', () => {
  it('write the same JSON from the same rows: with GPUs, without GPUs, with nulls', async () => {
    const owner = `owner ${awkward}`;
    const withGpus = await insert(owner, {
      hostname: 'rig.example.net',
      ip_address: '2001:db8::1',
      location: `location ${awkward}`,
      status: 'maintenance',
      min_gpus_per_rental: 2,
      metadata: { [`key ${awkward}`]: awkward, nested: { list: [1, 1.5, -0.25, true, null], empty: {} } },
      gpus: [
        gpu({ model_name: `model ${awkward}`, memory_bandwidth: Number.MAX_SAFE_INTEGER }),
        gpu({
          model_name: 'NVIDIA H100',
          architecture: null,
          compute_capability: null,
          cuda_cores: null,
          tensor_cores: 0,
          is_healthy: false,
        }),
      ] as ProviderInput['gpus'],
    });
    const withoutGpus = await insert(owner, { hostname: 'bare.example.net', metadata: { rack: 'r1' } });
    const withNulls = await insert(owner, {
      hostname: null,
      ip_address: null,
      location: null,
      gpus: [
        {
          model_name: 'RTX 4090',
          vram: 24564,
          driver_version: '550',
          architecture: null,
          compute_capability: null,
          cuda_cores: null,
          tensor_cores: null,
          memory_bandwidth: null,
          power_consumption: null,
          is_healthy: true,
        },
      ],
    });
    // Metrics as heartbeats write them (zeros included), and microseconds the milliseconds must truncate.
    await sql`UPDATE gpus SET utilization_gpu = 0, utilization_mem = 100, temperature = 255, power_draw = 0
              WHERE provider_id = ${withGpus} AND idx = 0`.execute(db);
    await sql`UPDATE providers SET registered_at = '2025-03-04 05:06:07.999999+00' WHERE id = ${withNulls}`.execute(db);
    // Silent past the bound: both show the effective status, offline.
    await sql`UPDATE provider_liveness SET last_seen_at = now() - interval '2 minutes' WHERE provider_id = ${withoutGpus}`.execute(
      db,
    );

    const page = await listProviders(db, { owner_id: owner, sort: 'registered_at', limit: 10 }, OFFLINE_AFTER_MS);
    expect(page.items).toHaveLength(3);
    const rendered = new Map(page.items.map((text) => [JSON.parse(text).id as string, text]));
    for (const id of [withGpus, withoutGpus, withNulls]) {
      const provider = await findProvider(db, id, OFFLINE_AFTER_MS);
      const presented = providerJson(provider!);
      const text = rendered.get(id);
      expect(text).toBeDefined();
      // Same keys in the same order, same values; byte for byte apart from jsonb's spacing in metadata.
      expect(Object.keys(JSON.parse(text!))).toEqual(PROVIDER_FIELDS.map((f) => f.name));
      expect(JSON.stringify(JSON.parse(text!))).toBe(JSON.stringify(presented));
      if (Object.keys(presented.metadata).length === 0) expect(text).toBe(JSON.stringify(presented));
    }
    const shown = (id: string) => JSON.parse(rendered.get(id)!);
    expect(shown(withoutGpus)).toMatchObject({ gpus: [], status: 'offline' });
    expect(shown(withNulls)).toMatchObject({
      hostname: null,
      ip_address: null,
      location: null,
      metadata: {},
      registered_at: '2025-03-04T05:06:07.999Z',
      gpus: [{ architecture: null, cuda_cores: null, utilization_gpu: null, is_healthy: true }],
    });
    expect(shown(withoutGpus).min_gpus_per_rental).toBe(1);
    expect(shown(withGpus)).toMatchObject({
      status: 'maintenance',
      min_gpus_per_rental: 2,
      gpus: [
        { utilization_gpu: 0, temperature: 255, memory_bandwidth: Number.MAX_SAFE_INTEGER },
        { architecture: null, tensor_cores: 0, is_healthy: false },
      ],
    });
  });
});
