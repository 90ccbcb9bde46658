/**
 * `createOutboxTable` makes the table billing's and the registry's migrations created before it existed: a database
 * migrated then and one migrated now have the same `outbox_events` (columns, constraints, indexes).
 */
import { type Kysely, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOutboxTable, type Database, dropOutboxTable, openDatabase } from '../src/index.ts';
import { createTestDatabase, type TestDatabase } from '../src/testing/index.ts';

let testDb: TestDatabase;
let database: Database<unknown>;
let db: Kysely<unknown>;

beforeAll(async () => {
  testDb = await createTestDatabase('common_outbox_table');
  database = await openDatabase<unknown>({ url: testDb.url, poolSize: 1 });
  db = database.db;
});
afterAll(async () => {
  await database?.close();
  await testDb?.drop();
});

/** The table's definition as the catalog holds it. */
async function definition() {
  const columns = await sql`
    SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS not_null,
           pg_get_expr(d.adbin, d.adrelid) AS default
    FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE a.attrelid = 'outbox_events'::regclass AND a.attnum > 0 AND NOT a.attisdropped
    ORDER BY a.attnum`.execute(db);
  const constraints = await sql`
    SELECT conname AS name, pg_get_constraintdef(oid) AS def FROM pg_constraint
    WHERE conrelid = 'outbox_events'::regclass ORDER BY conname`.execute(db);
  const indexes = await sql`
    SELECT indexname AS name, indexdef AS def FROM pg_indexes WHERE tablename = 'outbox_events' ORDER BY indexname`.execute(
    db,
  );
  return { columns: columns.rows, constraints: constraints.rows, indexes: indexes.rows };
}

describe('createOutboxTable', () => {
  it('makes the table the services migrated before it, and dropOutboxTable removes it', async () => {
    // The DDL billing's 0001-ledger and the registry's 20250105000000_outbox_events ran, as they wrote it.
    await sql`CREATE TABLE outbox_events (
        id uuid PRIMARY KEY,
        kind text NOT NULL,
        payload jsonb NOT NULL,
        correlation_id text,
        created_at timestamptz NOT NULL DEFAULT now(),
        published_at timestamptz
      )`.execute(db);
    await sql`CREATE INDEX outbox_events_unpublished ON outbox_events (created_at) WHERE published_at IS NULL`.execute(
      db,
    );
    const before = await definition();
    expect(before.columns).toHaveLength(6);
    expect(before.indexes).toHaveLength(2);
    await dropOutboxTable(db);

    await createOutboxTable(db);
    expect(await definition()).toEqual(before);

    await dropOutboxTable(db);
    await dropOutboxTable(db);
    const { rows } = await sql<{ t: string | null }>`SELECT to_regclass('outbox_events')::text AS t`.execute(db);
    expect(rows[0]?.t).toBeNull();
  });
});
