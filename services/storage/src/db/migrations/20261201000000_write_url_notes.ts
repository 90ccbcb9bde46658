/**
 * A write URL's note names its kind and the user it was handed to: one note per key for write URLs (a URL handed out
 * again for the key moves its `until` on, rather than adding a row each time), and a bound per user on the keys
 * with write URLs open (`object_store.max_open_write_urls`), counted by `catalog_expected_write_owners`. A copy's
 * notes stay one per copy (kind `copy`): a copy forgets its own once catalogued, never a URL's.
 *
 * The notes already there are taken for write URLs' (copies' last the copy's request), each key's latest kept.
 */
import { type Kysely, sql } from 'kysely';

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    ALTER TABLE catalog_expected_writes
      ADD COLUMN kind text NOT NULL DEFAULT 'url' CHECK (kind IN ('url', 'copy')),
      ADD COLUMN owner text`.execute(db);
  await sql`
    DELETE FROM catalog_expected_writes w
     USING catalog_expected_writes later
     WHERE later.bucket = w.bucket AND later.key = w.key AND later.until > w.until`.execute(db);
  await sql`
    ALTER TABLE catalog_expected_writes
      DROP CONSTRAINT catalog_expected_writes_pkey,
      ADD PRIMARY KEY (bucket, key, until, kind)`.execute(db);
  await sql`
    CREATE UNIQUE INDEX catalog_expected_write_urls ON catalog_expected_writes (bucket, key)
      WHERE kind = 'url'`.execute(db);
  await sql`
    CREATE INDEX catalog_expected_write_owners ON catalog_expected_writes (owner, until)
      WHERE kind = 'url' AND owner IS NOT NULL`.execute(db);
}

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function down(db: Kysely<any>): Promise<void> {
  await sql`DROP INDEX catalog_expected_write_owners`.execute(db);
  await sql`DROP INDEX catalog_expected_write_urls`.execute(db);
  await sql`
    DELETE FROM catalog_expected_writes w
     USING catalog_expected_writes other
     WHERE other.bucket = w.bucket AND other.key = w.key AND other.until = w.until AND w.kind = 'copy'
       AND other.kind = 'url'`.execute(db);
  await sql`
    ALTER TABLE catalog_expected_writes
      DROP CONSTRAINT catalog_expected_writes_pkey,
      ADD PRIMARY KEY (bucket, key, until)`.execute(db);
  await sql`ALTER TABLE catalog_expected_writes DROP COLUMN owner, DROP COLUMN kind`.execute(db);
}
