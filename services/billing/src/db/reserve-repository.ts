/**
 * What the proof of reserves reads of the ledger (domain/reserves/): what it owes by account kind together with the
 * withdrawals and payouts in flight, in one statement (one snapshot), and the payout pause's one row.
 */
import { type Kysely, type Selectable, sql, type Transaction } from 'kysely';
import type { BillingDB, PayoutPauseTable } from './schema.ts';

type Db = Kysely<BillingDB> | Transaction<BillingDB>;

export interface LedgerOwed {
  /** Sum of the balances of each kind of account the platform owes ('available', 'locked', 'pending_out', 'platform_fees'). */
  balances: Record<string, string>;
  /**
   * The withdrawals and payouts debited and not yet settled: their signatures, amounts and token account fees (decimal
   * strings; the fee is the part of the amount that never leaves the treasury).
   */
  inFlight: { signature: string | null; amount: string; fee: string }[];
}

/**
 * What the ledger owes and the payouts in flight, as one snapshot: a payout debited after it is in neither, one
 * settled before it is in neither, so `pending_out` is exactly the sum of `inFlight`.
 */
export async function ledgerOwed(db: Db): Promise<LedgerOwed> {
  const { rows } = await sql<{ balances: Record<string, string> | null; in_flight: LedgerOwed['inFlight'] }>`
    SELECT
      (SELECT json_object_agg(kind, balance) FROM (
        SELECT kind, sum(balance)::text AS balance FROM ledger_accounts
          WHERE kind IN ('available', 'locked', 'pending_out', 'platform_fees') GROUP BY kind) AS owed) AS balances,
      (SELECT coalesce(json_agg(json_build_object('signature', signature, 'amount', amount::text, 'fee', fee::text)), '[]')
         FROM transactions WHERE status = 'pending' AND type IN ('withdrawal', 'payout')) AS in_flight`.execute(db);
  return { balances: rows[0]?.balances ?? {}, inFlight: rows[0]?.in_flight ?? [] };
}

export type PayoutPauseRow = Selectable<PayoutPauseTable>;

export async function readPayoutPause(db: Db): Promise<PayoutPauseRow> {
  return db.selectFrom('payout_pause').selectAll().executeTakeFirstOrThrow();
}

/**
 * The pause as a payout's debit sees it: read with a share lock, so a pause (an update of the row) waits for debits
 * under way and every debit after it sees it.
 */
export async function lockPayoutPauseShared(trx: Transaction<BillingDB>): Promise<PayoutPauseRow> {
  return trx.selectFrom('payout_pause').selectAll().forShare().executeTakeFirstOrThrow();
}

/** Pauses unless already paused; the row as it stands afterwards and whether this call paused. */
export async function setPayoutPause(
  db: Db,
  pause: { at: Date; cause: 'reserve_shortfall' | 'operator'; reason: string; by: string | null; details: object },
): Promise<{ row: PayoutPauseRow; paused: boolean }> {
  const row = await db
    .updateTable('payout_pause')
    .set({
      paused_at: pause.at,
      cause: pause.cause,
      reason: pause.reason,
      paused_by: pause.by,
      details: JSON.stringify(pause.details),
    })
    .where('paused_at', 'is', null)
    .returningAll()
    .executeTakeFirst();
  return row ? { row, paused: true } : { row: await readPayoutPause(db), paused: false };
}

/** Ends the pause under the row's lock; the row as it was (null when nothing was paused). */
export async function clearPayoutPause(trx: Transaction<BillingDB>): Promise<PayoutPauseRow | null> {
  const before = await trx.selectFrom('payout_pause').selectAll().forUpdate().executeTakeFirstOrThrow();
  if (!before.paused_at) return null;
  await trx
    .updateTable('payout_pause')
    .set({ paused_at: null, cause: null, reason: null, paused_by: null, details: '{}' })
    .execute();
  return before;
}
