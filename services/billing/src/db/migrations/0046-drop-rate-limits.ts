/**
 * Billing XLVI: drops `rate_limits` (0037). The hourly withdrawal limit counts a wallet's withdrawal records since 0045,
 * and the version that did so wrote nothing here; the instances of the version before it, the table's last writers,
 * were gone once that version ran everywhere. Down puts the table back empty, as 0037 made it (its counters were
 * UNLOGGED, lost in a crash as well: a window then started afresh).
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const dropRateLimitsMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`DROP TABLE IF EXISTS rate_limits`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`
      CREATE UNLOGGED TABLE rate_limits (
        name text NOT NULL,
        key text NOT NULL,
        count integer NOT NULL,
        reset_at timestamptz NOT NULL,
        PRIMARY KEY (name, key)
      )`.execute(db);
    await sql`CREATE INDEX rate_limits_reset_at ON rate_limits (reset_at)`.execute(db);
  },
};
