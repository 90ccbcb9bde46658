/**
 * Billing XLV: `transactions_withdrawals`, a wallet's withdrawals by time: the hourly withdrawal limit counts them over
 * the hour before each request (domain/wallets/withdrawal-limit.ts), reading that wallet's newest withdrawals alone.
 * The limit no longer counts in `rate_limits` (0037), which stays for the instances of the version before while they
 * drain; nothing writes it any more.
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const withdrawalsByWalletMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`
      CREATE INDEX transactions_withdrawals ON transactions (wallet_id, created_at DESC) WHERE type = 'withdrawal'
    `.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`DROP INDEX transactions_withdrawals`.execute(db);
  },
};
