/**
 * The `outbox_events` table (`outbox.ts`), as the services' migrations create it. Frozen like a migration: databases
 * already made it with this DDL (billing's ledger migration, the registry's outbox migration), so a change to the
 * table is a new migration in each service, never an edit here.
 */
import { type Kysely, sql } from 'kysely';

/** Creates `outbox_events` and the partial index that serves the relay's "oldest unpublished first". */
// biome-ignore lint/suspicious/noExplicitAny: migrations are written against Kysely<any>
export async function createOutboxTable(db: Kysely<any>): Promise<void> {
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
}

/** Drops `outbox_events` (and its index) when it exists: a migration's `down`. */
// biome-ignore lint/suspicious/noExplicitAny: migrations are written against Kysely<any>
export async function dropOutboxTable(db: Kysely<any>): Promise<void> {
  await sql`DROP TABLE IF EXISTS outbox_events`.execute(db);
}
