/**
 * The registry's functions and triggers have one current definition each (`src/db/definitions.ts`), applied after
 * the frozen migrations: the database holds exactly those, a drifted or missing one is put back at the next start,
 * and instances starting together apply them once without failing.
 */
import { type Database, openDatabase } from '@gpu/common';
import { createTestDatabase, type TestDatabase } from '@gpu/common/testing';
import { type Kysely, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  FUNCTIONS,
  installedDefinitions,
  staleDefinitions,
  TRIGGERS,
  triggerShape,
  triggerSql,
} from '../src/db/definitions.ts';
import { migrateRegistry } from '../src/db/migrate.ts';

let testDb: TestDatabase;
let database: Database<unknown>;
let db: Kysely<unknown>;

beforeAll(async () => {
  testDb = await createTestDatabase('registry_definitions');
  database = await openDatabase<unknown>({ url: testDb.url, poolSize: 4 });
  db = database.db;
  await migrateRegistry(db);
});
afterAll(async () => {
  await database?.close();
  await testDb?.drop();
});

describe("the registry's database functions and triggers", () => {
  it('are exactly the current definitions: no other, none older, after every migration ran', async () => {
    const installed = await installedDefinitions(db);
    expect([...installed.functions.keys()].sort()).toEqual(FUNCTIONS.map((f) => f.name).sort());
    for (const f of FUNCTIONS) {
      expect(installed.functions.get(f.name), f.name).toEqual({ args: f.args, body: f.body });
    }
    expect([...installed.triggers.keys()].sort()).toEqual(TRIGGERS.map((t) => t.name).sort());
    for (const t of TRIGGERS) {
      expect(triggerShape(installed.triggers.get(t.name) ?? ''), t.name).toBe(
        triggerShape(triggerSql(t).replace('OR REPLACE ', '')),
      );
    }
    expect(await staleDefinitions(db)).toEqual({ functions: [], triggers: [] });
  });

  it('puts back a definition that drifted or went missing at the next start, two instances starting at once', async () => {
    // An older text of a function (as a migration once wrote it) and a trigger dropped by hand.
    await sql`
      CREATE OR REPLACE FUNCTION offer_free_gpus(p_status text, p_unrented integer, p_min integer)
      RETURNS integer LANGUAGE sql IMMUTABLE AS $$ SELECT CASE WHEN p_status = 'idle' THEN p_unrented ELSE 0 END $$
    `.execute(db);
    await sql`DROP TRIGGER gpus_offer_health ON gpus`.execute(db);
    const stale = await staleDefinitions(db);
    expect(stale.functions.map((f) => f.name)).toEqual(['offer_free_gpus']);
    expect(stale.triggers.map((t) => t.name)).toEqual(['gpus_offer_health']);

    await Promise.all([migrateRegistry(db), migrateRegistry(db)]);
    expect(await staleDefinitions(db)).toEqual({ functions: [], triggers: [] });
    // And it works as defined: an idle machine's unrented GPUs below its minimum are not free.
    const { rows } = await sql<{ free: number }>`SELECT offer_free_gpus('idle', 1, 2) AS free`.execute(db);
    expect(rows[0]?.free).toBe(0);
  });
});
