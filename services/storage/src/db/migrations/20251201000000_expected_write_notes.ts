/**
 * One row per expected-write note (a write URL's, a copy's), not one per key: a copy that forgets its own note once
 * it is catalogued leaves a write URL's note of the same key as it was (with one row per key, the two were merged
 * into the later `until`, and the copy's forgetting erased the URL's).
 */
import { type Kysely, sql } from 'kysely';

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    ALTER TABLE catalog_expected_writes
      DROP CONSTRAINT catalog_expected_writes_pkey,
      ADD PRIMARY KEY (bucket, key, until)`.execute(db);
}

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function down(db: Kysely<any>): Promise<void> {
  // Each key's latest note stays, as one row per key kept it.
  await sql`
    DELETE FROM catalog_expected_writes w
     USING catalog_expected_writes later
     WHERE later.bucket = w.bucket AND later.key = w.key AND later.until > w.until`.execute(db);
  await sql`
    ALTER TABLE catalog_expected_writes
      DROP CONSTRAINT catalog_expected_writes_pkey,
      ADD PRIMARY KEY (bucket, key)`.execute(db);
}
