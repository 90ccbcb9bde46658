/**
 * Billing XLI: `rental_sessions.outbid`, the highest bid per GPU-hour among the sessions whose GPUs this session's start
 * took (they ended `preempted`); null: it took none. A session at a bid may not cut its bid to that or below: a bid
 * of 3 that took a bid of 1.5's GPUs, cut to 1 the next minute, had evicted it at 1 (a renter's cheap eviction).
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const sessionOutbidMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`ALTER TABLE rental_sessions ADD COLUMN outbid numeric`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`ALTER TABLE rental_sessions DROP COLUMN outbid`.execute(db);
  },
};
