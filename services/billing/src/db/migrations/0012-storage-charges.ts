/**
 * Billing XII: stored bytes billed. One row per user and period the storage service measured: the bytes it found,
 * the GB-hours they make, the rate and cost at the time, and what was charged from the user's wallet (at most its
 * available balance; the rest is `unpaid`). A user's periods never overlap (checked under a per-user lock when a
 * report is charged), so a period is charged exactly once whatever reports repeat it. Frozen: written against
 * Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export function storageChargesMigration(scale: number): Migration {
  const money = sql.raw(`numeric(38, ${scale})`);
  return {
    // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
    async up(db: Kysely<any>) {
      await sql`
        CREATE TABLE storage_charges (
          id uuid PRIMARY KEY,
          user_id uuid NOT NULL,
          wallet_id uuid REFERENCES wallets (id),
          period_start timestamptz NOT NULL,
          period_end timestamptz NOT NULL,
          bytes bigint NOT NULL CHECK (bytes >= 0),
          gb_hours numeric NOT NULL CHECK (gb_hours >= 0),
          rate_per_gb_hour numeric NOT NULL CHECK (rate_per_gb_hour >= 0),
          cost ${money} NOT NULL CHECK (cost >= 0),
          charged ${money} NOT NULL CHECK (charged >= 0),
          unpaid ${money} NOT NULL CHECK (unpaid >= 0),
          transaction_id uuid REFERENCES transactions (id),
          created_at timestamptz NOT NULL DEFAULT now(),
          CONSTRAINT storage_charges_period CHECK (period_end > period_start),
          CONSTRAINT storage_charges_paid CHECK (charged + unpaid = cost),
          CONSTRAINT storage_charges_user_period UNIQUE (user_id, period_start)
        )`.execute(db);
      await sql`CREATE INDEX storage_charges_user_time ON storage_charges (user_id, period_start DESC, id DESC)`.execute(
        db,
      );
      await sql`CREATE INDEX storage_charges_time ON storage_charges (period_start DESC, id DESC)`.execute(db);
    },
    // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
    async down(db: Kysely<any>) {
      await sql`DROP TABLE storage_charges`.execute(db);
    },
  };
}
