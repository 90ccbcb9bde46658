/**
 * The object catalog: one row per object (bucket, key, size, content type, ETag, owner, times), the buckets it knows
 * and the reconciliation runs' claims. Keys sort by their UTF-8 bytes (`COLLATE "C"`), the order of the store's
 * listings and of the service's cursors, so a listing page is one walk of the primary key.
 *
 * Frozen: Kysely<any> and raw SQL.
 */
import { type Kysely, sql } from 'kysely';

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function up(db: Kysely<any>): Promise<void> {
  // A lock not had within 10 s fails the start (it is retried) rather than holding every other statement behind it.
  await sql`SET LOCAL lock_timeout = '10s'`.execute(db);
  await sql`
    CREATE TABLE objects (
      bucket text COLLATE "C" NOT NULL,
      key text COLLATE "C" NOT NULL,
      size bigint NOT NULL CHECK (size >= 0),
      content_type text,
      etag text,
      owner_id text,
      last_modified timestamptz,
      created_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (bucket, key)
    )`.execute(db);
  // Metering sums every owner's bytes each period.
  await sql`CREATE INDEX objects_owner_idx ON objects (owner_id) INCLUDE (size) WHERE owner_id IS NOT NULL`.execute(db);
  await sql`
    CREATE TABLE catalog_buckets (
      name text COLLATE "C" PRIMARY KEY,
      reconciled_at timestamptz
    )`.execute(db);
  await sql`
    CREATE TABLE reconcile_runs (
      period_start timestamptz PRIMARY KEY,
      instance_id text NOT NULL,
      started_at timestamptz NOT NULL DEFAULT now()
    )`.execute(db);
}

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function down(db: Kysely<any>): Promise<void> {
  await sql`DROP TABLE reconcile_runs`.execute(db);
  await sql`DROP TABLE catalog_buckets`.execute(db);
  await sql`DROP TABLE objects`.execute(db);
}
