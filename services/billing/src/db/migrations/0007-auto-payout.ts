/**
 * Billing VII: automatic payouts, a provider setting. `auto_payout_to` is the owner address a provider wallet's
 * earnings are paid to, on chain, once a session ends and the available earnings reach the minimum payout; null is
 * off (the default). Only provider wallets have it. A payout that fails (a destination that turned into a token
 * account, a transfer the chain refused) is tried again after a backoff: `auto_payout_failures` in a row,
 * `auto_payout_retry_at` the earliest next attempt. Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const autoPayoutMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`ALTER TABLE wallets ADD COLUMN auto_payout_to text`.execute(db);
    await sql`ALTER TABLE wallets ADD COLUMN auto_payout_failures integer NOT NULL DEFAULT 0`.execute(db);
    await sql`ALTER TABLE wallets ADD COLUMN auto_payout_retry_at timestamptz`.execute(db);
    await sql`ALTER TABLE wallets ADD CONSTRAINT wallets_auto_payout_provider
      CHECK (owner_type = 'provider' OR auto_payout_to IS NULL)`.execute(db);
    await sql`CREATE INDEX wallets_auto_payout ON wallets (id) WHERE auto_payout_to IS NOT NULL`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`DROP INDEX wallets_auto_payout`.execute(db);
    await sql`ALTER TABLE wallets DROP CONSTRAINT wallets_auto_payout_provider`.execute(db);
    await sql`ALTER TABLE wallets DROP COLUMN auto_payout_retry_at`.execute(db);
    await sql`ALTER TABLE wallets DROP COLUMN auto_payout_failures`.execute(db);
    await sql`ALTER TABLE wallets DROP COLUMN auto_payout_to`.execute(db);
  },
};
