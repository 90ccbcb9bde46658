/**
 * Billing XXXVI: a usage record's key is its (session_id, message_id), the unique key every usage batch probes and
 * inserts into; the primary key's index on `id` goes. Nothing looks a record up by its ID (records are read by session
 * and message, and purged by session), so that index was one more B-tree insert per usage update, some 4 us of
 * PostgreSQL's time each at the fleet's rate (docs/benchmarks.md, billing-usage). IDs stay unique by construction
 * (random UUIDs). The unique key, on NOT NULL columns, is the table's replica identity, as the primary key was.
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const usageRecordKeyMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`ALTER TABLE usage_records REPLICA IDENTITY USING INDEX usage_records_message_unique`.execute(db);
    await sql`ALTER TABLE usage_records DROP CONSTRAINT usage_records_pkey`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`ALTER TABLE usage_records ADD CONSTRAINT usage_records_pkey PRIMARY KEY (id)`.execute(db);
    await sql`ALTER TABLE usage_records REPLICA IDENTITY DEFAULT`.execute(db);
  },
};
