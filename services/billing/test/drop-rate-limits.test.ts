/**
 * Migration 0046 drops `rate_limits`, which the withdrawal limit no longer counts in (0045): on a database of the
 * version that still counted there, with a window in it, the table is gone after the migration, and migrating back
 * puts it back as 0037 made it (unlogged, empty), so that the version before can run again.
 */
import { type Kysely, sql } from 'kysely';
import { afterAll, expect, it } from 'vitest';
import { unmigratedBilling } from './support/migrations.ts';

const closing: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const close of closing) await close();
});

/** `rate_limits` as the catalog has it: absent, or its persistence (`u`: unlogged) and its rows. */
async function rateLimits(db: Kysely<unknown>) {
  const { rows } = await sql<{ persistence: string | null }>`
    SELECT (SELECT relpersistence::text FROM pg_class WHERE oid = to_regclass('rate_limits')) AS persistence`.execute(
    db,
  );
  const persistence = rows[0]?.persistence ?? null;
  if (persistence === null) return null;
  const counted = await sql<{ n: number }>`SELECT count(*)::int AS n FROM rate_limits`.execute(db);
  return { persistence, rows: counted.rows[0]?.n };
}

it('drops the counters of the version before, and migrating back makes the table again', async () => {
  const { db, migrator, close } = await unmigratedBilling();
  closing.push(close);
  expect((await migrator.migrateTo('0045-withdrawals-by-wallet')).error).toBeUndefined();
  await sql`INSERT INTO rate_limits (name, key, count, reset_at)
    VALUES ('withdrawals', 'a wallet', 3, now() + interval '1 hour')`.execute(db);
  expect(await rateLimits(db)).toEqual({ persistence: 'u', rows: 1 });

  const up = await migrator.migrateTo('0046-drop-rate-limits');
  expect(up.error).toBeUndefined();
  expect(up.results?.map((r) => [r.migrationName, r.status])).toEqual([['0046-drop-rate-limits', 'Success']]);
  expect(await rateLimits(db)).toBeNull();

  const down = await migrator.migrateDown();
  expect(down.error).toBeUndefined();
  expect(await rateLimits(db)).toEqual({ persistence: 'u', rows: 0 });
});
