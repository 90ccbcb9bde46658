/**
 * Billing XXI: withdrawals and payouts can be paused (domain/reserves/pause.ts): `payout_pause` is one row, paused
 * while `paused_at` is set: by a reserve check that found the treasury short of what the ledger owes (`cause`
 * `reserve_shortfall`, with the check's figures in `details`) or by an operator (`operator`, with their ID and why),
 * until an operator resumes them. Every payout reads the row with a share lock in the transaction that debits it, so
 * none is debited once a pause has committed. Pauses and resumptions are in the audit trail.
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const payoutPauseMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`
      CREATE TABLE payout_pause (
        id boolean PRIMARY KEY DEFAULT true CONSTRAINT payout_pause_one_row CHECK (id),
        paused_at timestamptz,
        cause text CONSTRAINT payout_pause_cause CHECK (cause IN ('reserve_shortfall', 'operator')),
        reason text,
        paused_by text,
        details jsonb NOT NULL DEFAULT '{}',
        CONSTRAINT payout_pause_cause_given CHECK ((paused_at IS NULL) = (cause IS NULL))
      )`.execute(db);
    await sql`INSERT INTO payout_pause (id) VALUES (true)`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`DROP TABLE payout_pause`.execute(db);
  },
};
