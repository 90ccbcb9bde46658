/**
 * Billing XXXV: usage records no longer carry a foreign key to their session. The key was checked once per inserted
 * record (a trigger running a query that locks the session row again), some 8 us of PostgreSQL's time per usage
 * update, an eighth of its share, at the fleet's rate (docs/benchmarks.md, billing-usage). What it guarded is held by
 * construction: a record is written only in the usage batch's transaction that holds its session's row lock (read by
 * the batch's first statement, domain/sessions/usage-updates.ts), and sessions are never deleted (their usage records
 * are purged, the rows stay).
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const usageRecordSessionCheckMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`ALTER TABLE usage_records DROP CONSTRAINT usage_records_session_id_fkey`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`ALTER TABLE usage_records ADD CONSTRAINT usage_records_session_id_fkey
      FOREIGN KEY (session_id) REFERENCES rental_sessions (id)`.execute(db);
  },
};
