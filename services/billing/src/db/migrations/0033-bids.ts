/**
 * Billing XXXIII: interruptible leases at a bid (domain/leases/policy.ts). A machine takes bids when its provider set
 * a floor (`provider_rates.bid_floor`, per GPU-hour; null: it takes none). An interruptible session holds its bid
 * (`rental_sessions.bid`, per GPU-hour; null: on demand); one whose GPUs a higher bid or an on-demand start took
 * names that start's session (`preempted_by`), written in the same transaction: every preemption has exactly one
 * winner. Rates, as every rate column: plain numeric.
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const bidsMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`ALTER TABLE provider_rates ADD COLUMN bid_floor numeric CHECK (bid_floor > 0)`.execute(db);
    await sql`ALTER TABLE rental_sessions ADD COLUMN bid numeric CHECK (bid > 0), ADD COLUMN preempted_by uuid`.execute(
      db,
    );
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`ALTER TABLE rental_sessions DROP COLUMN bid, DROP COLUMN preempted_by`.execute(db);
    await sql`ALTER TABLE provider_rates DROP COLUMN bid_floor`.execute(db);
  },
};
