/**
 * Billing XXXIV: a running bid changes (`POST /billing/sessions/{id}/bid`, domain/sessions/bids.ts). A session whose
 * rate changed keeps its rates by minute of its clock (`rental_sessions.rate_segments`: `[{from_minute, hourly_rate,
 * bid}]`, ascending, the last one the rate in force, `total_hourly_rate`); null, as for every session that never
 * changed: one rate from its first minute. Rates, as every rate column: decimal strings.
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const bidChangesMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`ALTER TABLE rental_sessions ADD COLUMN rate_segments jsonb`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`ALTER TABLE rental_sessions DROP COLUMN rate_segments`.execute(db);
  },
};
