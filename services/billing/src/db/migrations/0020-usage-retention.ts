/**
 * Billing XX: usage records are kept for `billing.usage_retention` after their session ended (a usage record is one
 * daemon report: at 10,000 reports a second the table would grow by 860 million rows a day; the session, its billing
 * record and the ledger keep what was billed). `rental_sessions.usage_purged` marks a session whose records are gone,
 * and a partial index finds the ended sessions not purged yet, oldest first, without touching `usage_records`' inserts
 * (no index of theirs added). A constant default: no rewrite of the table.
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const usageRetentionMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    // The ALTER and the index wait for running sessions' row locks; waiting long would hold every session write
    // behind them: give up after 10 s instead (the start fails and is retried; the migration is all or nothing).
    await sql`SET LOCAL lock_timeout = '10s'`.execute(db);
    await sql`ALTER TABLE rental_sessions ADD COLUMN usage_purged boolean NOT NULL DEFAULT false`.execute(db);
    await sql`
      CREATE INDEX rental_sessions_usage_to_purge ON rental_sessions (ended_at)
      WHERE ended_at IS NOT NULL AND NOT usage_purged`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`DROP INDEX rental_sessions_usage_to_purge`.execute(db);
    await sql`ALTER TABLE rental_sessions DROP COLUMN usage_purged`.execute(db);
  },
};
