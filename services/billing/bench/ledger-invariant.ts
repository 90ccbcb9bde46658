/** The ledger's invariant, checked after a benchmark run: what "intact" and "balanced" mean in its report. */
import { type Kysely, sql } from 'kysely';
import type { BillingDB } from '../src/db/schema.ts';
import { Dec } from '../src/domain/ledger/money.ts';

export interface LedgerInvariant {
  /** accounts whose balance differs from their credits minus debits */
  badBalance: number;
  /** non-negative accounts below zero */
  negative: number;
  /** the sum of every account (zero in a double-entry ledger) */
  total: string;
  /** locked accounts that differ from what their wallet's pending holds hold */
  lockedMismatch: number;
  intact: boolean;
}

export async function checkLedgerInvariant(db: Kysely<BillingDB>): Promise<LedgerInvariant> {
  // Set-based (each table read once, grouped and hash-joined), so that the check stays seconds at a million
  // accounts, where a sum per account over the transfers ran for minutes.
  const { rows } = await sql<{ bad_balance: number; negative: number; total: string; locked_mismatch: number }>`
    WITH flows AS (
      SELECT account_id, sum(amount) AS net
        FROM (SELECT credit_account_id AS account_id, amount FROM ledger_transfers
              UNION ALL
              SELECT debit_account_id, -amount FROM ledger_transfers) t
       GROUP BY account_id
    ), held AS (
      SELECT wallet_id, sum(amount - posted - released) AS held
        FROM holds WHERE status = 'pending' GROUP BY wallet_id
    )
    SELECT
      (SELECT count(*) FROM ledger_accounts a LEFT JOIN flows f ON f.account_id = a.id
        WHERE a.balance <> coalesce(f.net, 0)) AS bad_balance,
      (SELECT count(*) FROM ledger_accounts WHERE non_negative AND balance < 0) AS negative,
      (SELECT sum(balance) FROM ledger_accounts) AS total,
      (SELECT count(*) FROM ledger_accounts a LEFT JOIN held h ON h.wallet_id = a.wallet_id
        WHERE a.kind = 'locked' AND a.balance <> coalesce(h.held, 0)) AS locked_mismatch`.execute(db);
  const c = rows[0]!;
  const result = {
    badBalance: Number(c.bad_balance),
    negative: Number(c.negative),
    total: new Dec(c.total ?? 0).toFixed(),
    lockedMismatch: Number(c.locked_mismatch),
  };
  return {
    ...result,
    intact:
      result.badBalance === 0 && result.negative === 0 && new Dec(result.total).isZero() && result.lockedMismatch === 0,
  };
}
