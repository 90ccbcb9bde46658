/**
 * Billing X: why the last automatic payout failed (`auto_payout_last_failure`, null after a success or a new setting),
 * so a provider whose payouts are refused (say, a setting saved before the platform's own addresses were refused)
 * reads the reason with the setting instead of waiting for earnings that never come. Frozen: written against
 * Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const autoPayoutFailureMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`ALTER TABLE wallets ADD COLUMN auto_payout_last_failure text`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`ALTER TABLE wallets DROP COLUMN auto_payout_last_failure`.execute(db);
  },
};
