/**
 * Incremental reconciliation: where the sweep over the store's buckets has come (one row: the bucket and the last key
 * compared; each run goes on from it), and the writes the service expects behind its back (a presigned PUT's or a
 * write grant's key, until its URL expires), which every run looks at whatever the sweep's position.
 *
 * Frozen: Kysely<any> and raw SQL.
 */
import { type Kysely, sql } from 'kysely';

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function up(db: Kysely<any>): Promise<void> {
  await sql`SET LOCAL lock_timeout = '10s'`.execute(db);
  await sql`
    CREATE TABLE catalog_sweep (
      id smallint PRIMARY KEY DEFAULT 1 CHECK (id = 1),
      bucket text COLLATE "C" NOT NULL,
      after_key text COLLATE "C"
    )`.execute(db);
  await sql`
    CREATE TABLE catalog_expected_writes (
      bucket text COLLATE "C" NOT NULL,
      key text COLLATE "C" NOT NULL,
      until timestamptz NOT NULL,
      PRIMARY KEY (bucket, key)
    )`.execute(db);
}

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function down(db: Kysely<any>): Promise<void> {
  await sql`DROP TABLE catalog_expected_writes`.execute(db);
  await sql`DROP TABLE catalog_sweep`.execute(db);
}
