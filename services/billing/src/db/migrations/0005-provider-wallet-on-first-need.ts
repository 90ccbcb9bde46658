/**
 * Billing V: a provider wallet is opened on first need (the first session on a machine), before its owner has
 * named an address: `solana_address` may be null until then, and payouts from such a wallet name their
 * destination. Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const providerWalletOnFirstNeedMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`ALTER TABLE wallets ALTER COLUMN solana_address DROP NOT NULL`.execute(db);
    await sql`ALTER TABLE wallets ADD CONSTRAINT wallets_user_address
      CHECK (owner_type <> 'user' OR solana_address IS NOT NULL)`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`ALTER TABLE wallets DROP CONSTRAINT wallets_user_address`.execute(db);
    await sql`ALTER TABLE wallets ALTER COLUMN solana_address SET NOT NULL`.execute(db);
  },
};
