/**
 * Billing VIII: room on each page of `rental_sessions` for the next version of its rows. Every usage update
 * rewrites its session's row (billed minutes, power, last report); with full pages (the default fillfactor 100)
 * the new version lands on another page, so every index of the table gains an entry and the table bloats (92 % of
 * the updates in the usage benchmark). With room on the page PostgreSQL writes a heap-only tuple: no index entry,
 * and the page's dead versions are pruned as it goes. Applies to pages written from now on. Frozen: written
 * against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const sessionFillfactorMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`ALTER TABLE rental_sessions SET (fillfactor = 70)`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`ALTER TABLE rental_sessions RESET (fillfactor)`.execute(db);
  },
};
