/**
 * Billing XIX: `outbox_events.trace_context`, the W3C trace context of the request that recorded an event (tracing on
 * only; @gpu/common's messaging/outbox.ts), which the relay carries on into the message's headers. Nullable, no
 * default: no rewrite of the table.
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const outboxTraceContextMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    // The ALTER waits for the relay's row locks; waiting long would hold every outbox insert behind it: give up after
    // 10 s instead (the start fails and is retried; the migration is all or nothing).
    await sql`SET LOCAL lock_timeout = '10s'`.execute(db);
    await sql`ALTER TABLE outbox_events ADD COLUMN trace_context jsonb`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`ALTER TABLE outbox_events DROP COLUMN trace_context`.execute(db);
  },
};
