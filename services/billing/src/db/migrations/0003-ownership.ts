/**
 * Billing III: who holds what, for access control. A wallet records the user who holds it (`holder_id`: the owner
 * of a user wallet; for a provider wallet the user who owns the provider machine, resolved from the registry when
 * the wallet is made); a session and its billing record record the provider's owner, so the daemon acting for that
 * owner may report usage and the owner may read the session. Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const ownershipMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`ALTER TABLE wallets ADD COLUMN holder_id uuid`.execute(db);
    await sql`UPDATE wallets SET holder_id = owner_id WHERE owner_type = 'user'`.execute(db);
    await sql`CREATE INDEX wallets_holder ON wallets (holder_id)`.execute(db);
    await sql`ALTER TABLE rental_sessions ADD COLUMN provider_owner_id uuid`.execute(db);
    await sql`UPDATE rental_sessions s SET provider_owner_id = w.holder_id
                FROM wallets w WHERE w.id = s.provider_wallet_id`.execute(db);
    await sql`ALTER TABLE billing_records ADD COLUMN provider_owner_id uuid`.execute(db);
    await sql`UPDATE billing_records r SET provider_owner_id = s.provider_owner_id
                FROM rental_sessions s WHERE s.id = r.session_id`.execute(db);
    await sql`CREATE INDEX billing_records_provider_owner ON billing_records (provider_owner_id, ended_at DESC)`.execute(
      db,
    );
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`ALTER TABLE billing_records DROP COLUMN provider_owner_id`.execute(db);
    await sql`ALTER TABLE rental_sessions DROP COLUMN provider_owner_id`.execute(db);
    await sql`ALTER TABLE wallets DROP COLUMN holder_id`.execute(db);
  },
};
