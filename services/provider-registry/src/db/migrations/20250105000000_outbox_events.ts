/**
 * The transactional outbox of status events (the platform's one event
 * pattern, `Outbox` in `@gpu/common`): every status change writes its event
 * here in the statement or transaction of the change, and a relay publishes
 * the rows on NATS afterwards, so an event goes out exactly when its change
 * committed and survives a crash in between. The partial index serves the
 * relay's "oldest unpublished first". Frozen: Kysely<any> and raw SQL.
 */
import { type Kysely, sql } from 'kysely';

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE TABLE outbox_events (
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

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function down(db: Kysely<any>): Promise<void> {
  await sql`DROP TABLE outbox_events`.execute(db);
}
