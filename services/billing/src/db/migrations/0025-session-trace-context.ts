/**
 * Billing XXV: `rental_sessions.trace_context`, the W3C trace context (`traceparent`, `tracestate`) of the request
 * that started a session (tracing on only; null off). The session hands it to its provider daemon, whose usage and
 * workload reports continue that trace (docs/conventions.md, "Headers"). Nullable, no default: no rewrite of the table.
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const sessionTraceContextMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    // The ALTER waits for the row locks of sessions being billed; waiting long would hold every usage update behind
    // it: give up after 10 s instead (the start fails and is retried; the migration is all or nothing).
    await sql`SET LOCAL lock_timeout = '10s'`.execute(db);
    await sql`ALTER TABLE rental_sessions ADD COLUMN trace_context jsonb`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`ALTER TABLE rental_sessions DROP COLUMN trace_context`.execute(db);
  },
};
