/**
 * Billing XV: a machine's own rates are announced to the market once, not by every instance at every start.
 *
 * - `provider_rates.announced_at`: the `updated_at` of the rates last recorded for the market (the outbox then
 *   delivers them); null: never. Setting rates records their announcement in the same transaction, so only rates
 *   set before the market existed (every row at this migration) are announced at a start, once.
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const ratesAnnouncedMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`ALTER TABLE provider_rates ADD COLUMN announced_at timestamptz`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`ALTER TABLE provider_rates DROP COLUMN announced_at`.execute(db);
  },
};
