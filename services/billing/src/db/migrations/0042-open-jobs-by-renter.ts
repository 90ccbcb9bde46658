/**
 * Billing XLII: `jobs_open_by_user`, a renter's jobs not ended, which a submit counts against
 * `jobs.max_open_per_renter` (under the renter's lock): the count reads the open ones alone, however many ended.
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const openJobsByRenterMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`CREATE INDEX jobs_open_by_user ON jobs (user_id) WHERE ended_at IS NULL`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`DROP INDEX jobs_open_by_user`.execute(db);
  },
};
