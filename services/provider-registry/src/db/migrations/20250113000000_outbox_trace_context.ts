/**
 * `outbox_events.trace_context`: the W3C trace context of the request that recorded an event (tracing on only;
 * @gpu/common's messaging/outbox.ts), which the relay carries on into the message's headers. Nullable, no default: no
 * rewrite of the table.
 *
 * Frozen: Kysely<any> and raw SQL.
 */
import { type Kysely, sql } from 'kysely';

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function up(db: Kysely<any>): Promise<void> {
  // The ALTER waits for the relay's row locks; waiting long would hold every outbox insert behind it: give up after
  // 10 s instead (the start fails and is retried; the migration is all or nothing).
  await sql`SET LOCAL lock_timeout = '10s'`.execute(db);
  await sql`ALTER TABLE outbox_events ADD COLUMN trace_context jsonb`.execute(db);
}

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function down(db: Kysely<any>): Promise<void> {
  await sql`ALTER TABLE outbox_events DROP COLUMN trace_context`.execute(db);
}
