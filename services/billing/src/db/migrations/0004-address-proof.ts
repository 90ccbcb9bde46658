/**
 * Billing IV: a wallet's Solana address is proven, not declared. The holder signs a challenge with the address's
 * key; until then no deposit is credited to the wallet (anyone could otherwise register a victim's address and
 * claim the victim's deposit signature first). Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const addressProofMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`ALTER TABLE wallets
      ADD COLUMN address_proven_at timestamptz,
      ADD COLUMN address_challenge text,
      ADD COLUMN address_challenge_expires_at timestamptz`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`ALTER TABLE wallets
      DROP COLUMN address_proven_at, DROP COLUMN address_challenge, DROP COLUMN address_challenge_expires_at`.execute(
      db,
    );
  },
};
