/**
 * Billing XXXVII: `rate_limits`, the windows of @gpu/common's `RateLimiter`, shared by every instance: how many
 * withdrawals a wallet made in the current window (`billing.withdrawals_per_hour`). UNLOGGED: counters are cheap to
 * write and may be lost in a crash (a window then starts afresh).
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const rateLimitsMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
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
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`DROP TABLE rate_limits`.execute(db);
  },
};
