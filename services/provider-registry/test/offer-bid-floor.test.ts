/**
 * The bid floor on each offer (`offers.bid_floor`, the offer bid floor migration): copied from the machine's rates by
 * the database, whoever writes them — this release's code or the one before it during a rolling update, which knows
 * nothing of the copy — and given to each new offer; the migration copies the floors held before it, and down takes
 * the column and its triggers away. Against real PostgreSQL, in a database of its own.
 */
import { migrateToLatest, openDatabase } from '@gpu/common';
import { createTestDatabase } from '@gpu/common/testing';
import { type Kysely, sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { migrations } from '../src/db/migrations/index.ts';
import { registryMigrator } from './helpers.ts';

const A = '00000000-0000-4000-8000-00000000000a';
const B = '00000000-0000-4000-8000-00000000000b';
const C = '00000000-0000-4000-8000-00000000000c';

describe('the offer bid floor migration', () => {
  it('copies the floors held, keeps each offer in step with its rates as any writer sets them, and goes down', async () => {
    const testDb = await createTestDatabase('registry_offer_bid_floor');
    const database = await openDatabase({ url: testDb.url, poolSize: 2 });
    try {
      // biome-ignore lint/suspicious/noExplicitAny: migrations run on Kysely<any>, as the migrator does
      const db = database.db as Kysely<any>;
      const before = Object.fromEntries(Object.entries(migrations).filter(([name]) => name < '20250121'));
      await migrateToLatest(db, 'provider-registry', before);
      // Three machines as the release before wrote them: A takes bids at 1.5, B at none, C has no rates at all.
      await sql`
        INSERT INTO providers (id, owner_id, name, status) VALUES
          (${A}, 'o', 'a', 'idle'), (${B}, 'o', 'b', 'idle'), (${C}, 'o', 'c', 'idle')`.execute(db);
      await sql`
        INSERT INTO provider_prices (provider_id, base_rates, bid_floor, occurred_at) VALUES
          (${A}, '{}', 1.5, now()), (${B}, '{}', NULL, now())`.execute(db);
      const offer = (id: string, key: string) => sql`
        INSERT INTO offers (provider_id, model_key, gpu_model, model_names, gpu_count, driver_version, status)
        VALUES (${id}, ${key}, ${key}, ARRAY[${key}], 1, '550', 'idle')`;
      for (const [id, key] of [
        [A, 'h100'],
        [A, 'a100'],
        [B, 'h100'],
        [C, 'h100'],
      ] as const) {
        await offer(id, key).execute(db);
      }

      await migrateToLatest(db, 'provider-registry', migrations);
      const floors = async () =>
        (
          await sql<{ provider_id: string; model_key: string; bid_floor: string | null }>`
            SELECT provider_id, model_key, bid_floor::text FROM offers ORDER BY provider_id, model_key`.execute(db)
        ).rows.map((r) => `${r.provider_id.slice(-1)} ${r.model_key} ${r.bid_floor}`);
      expect(await floors()).toEqual(['a a100 1.5', 'a h100 1.5', 'b h100 null', 'c h100 null']);

      // Rates written as the release before writes them (it knows nothing of the copy): the offers follow.
      await sql`UPDATE provider_prices SET bid_floor = 0.8, occurred_at = now() WHERE provider_id = ${A}`.execute(db);
      await sql`UPDATE provider_prices SET bid_floor = 2 WHERE provider_id = ${B}`.execute(db);
      await sql`
        INSERT INTO provider_prices (provider_id, base_rates, bid_floor, occurred_at)
        VALUES (${C}, '{}', 3, now())`.execute(db);
      expect(await floors()).toEqual(['a a100 0.8', 'a h100 0.8', 'b h100 2', 'c h100 3']);
      // A machine that stops taking bids, and a new offer of a machine that takes them.
      await sql`UPDATE provider_prices SET bid_floor = NULL WHERE provider_id = ${C}`.execute(db);
      await offer(B, 'l40').execute(db);
      expect(await floors()).toEqual(['a a100 0.8', 'a h100 0.8', 'b h100 2', 'b l40 2', 'c h100 null']);

      const migrator = registryMigrator(db);
      const { error, results } = await migrator.migrateTo('20250120000000_gpus_fillfactor');
      expect(error).toBeUndefined();
      expect(results?.map((r) => [r.migrationName, r.status]).at(-1)).toEqual([
        '20250121000000_offer_bid_floor',
        'Success',
      ]);
      const { rows: left } = await sql`
        SELECT 1 FROM pg_attribute WHERE attrelid = 'offers'::regclass AND attname = 'bid_floor' AND NOT attisdropped
        UNION ALL SELECT 1 FROM pg_trigger WHERE tgname IN ('offers_bid_floor', 'provider_prices_offer_bid_floor')
        UNION ALL SELECT 1 FROM pg_proc WHERE proname IN ('offers_bid_floor', 'provider_prices_offer_bid_floor')`.execute(
        db,
      );
      expect(left).toEqual([]);
    } finally {
      await database.close();
      await testDb.drop();
    }
  });
});
