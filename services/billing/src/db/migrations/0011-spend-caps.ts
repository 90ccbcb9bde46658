/**
 * Billing XI: spend caps and low-balance warnings on rental sessions. `spend_cap` is the most a session may cost in
 * all (null: no cap; at the token's scale, above zero): billing ends the session once its cost reaches it, billed
 * exactly to it. `low_balance_at` is when the session's renter was last warned that the funds left (its hold and the
 * wallet's available balance) pay for less than `billing.low_balance_warning` of running (null: not low). Frozen:
 * written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export function spendCapsMigration(scale: number): Migration {
  const money = sql.raw(`numeric(38, ${scale})`);
  return {
    // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
    async up(db: Kysely<any>) {
      await sql`
        ALTER TABLE rental_sessions
          ADD COLUMN spend_cap ${money} CHECK (spend_cap > 0),
          ADD COLUMN low_balance_at timestamptz`.execute(db);
      await sql`ALTER TABLE billing_records ADD COLUMN spend_cap ${money}`.execute(db);
    },
    // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
    async down(db: Kysely<any>) {
      await sql`ALTER TABLE billing_records DROP COLUMN spend_cap`.execute(db);
      await sql`ALTER TABLE rental_sessions DROP COLUMN spend_cap, DROP COLUMN low_balance_at`.execute(db);
    },
  };
}
