/**
 * The ledger's invariants, checked on a billing database: every account's balance equals its entries (credits
 * minus debits), no non-negative account is below zero, all accounts sum to zero (double entry), every wallet's
 * `locked` equals what its pending holds still hold, and every `pending_out` equals its pending withdrawals and
 * payouts. For any test that moved money, in-process or through real service processes.
 */
import { type Kysely, sql } from 'kysely';
import type { BillingDB } from '../../src/db/schema.ts';
import { Dec } from '../../src/domain/ledger/money.ts';

/** What is wrong with the ledger (empty: consistent), and the accounts, for further assertions. */
export async function ledgerProblems(db: Kysely<BillingDB>) {
  const accounts = await db.selectFrom('ledger_accounts').selectAll().execute();
  const sums = await sql<{ id: string; credits: string; debits: string }>`
    SELECT a.id,
           coalesce((SELECT sum(amount) FROM ledger_transfers WHERE credit_account_id = a.id), 0) AS credits,
           coalesce((SELECT sum(amount) FROM ledger_transfers WHERE debit_account_id = a.id), 0) AS debits
      FROM ledger_accounts a`.execute(db);
  const problems: string[] = [];
  let total = new Dec(0);
  for (const a of accounts) {
    const s = sums.rows.find((r) => r.id === a.id)!;
    const derived = new Dec(s.credits).minus(s.debits);
    if (!derived.eq(a.balance)) problems.push(`account ${a.id} (${a.kind}) balance ${a.balance} != entries ${derived}`);
    if (a.non_negative && new Dec(a.balance).isNegative()) problems.push(`account ${a.id} is negative`);
    total = total.plus(a.balance);
  }
  if (!total.isZero()) problems.push(`accounts sum to ${total}, not 0`);
  const holds = await sql<{ wallet_id: string; locked: string; held: string }>`
    SELECT a.wallet_id, a.balance AS locked,
           coalesce((SELECT sum(amount - posted - released) FROM holds h
                      WHERE h.wallet_id = a.wallet_id AND h.status = 'pending'), 0) AS held
      FROM ledger_accounts a WHERE a.kind = 'locked'`.execute(db);
  for (const h of holds.rows) {
    if (!new Dec(h.locked).eq(h.held)) problems.push(`wallet ${h.wallet_id} locks ${h.locked} but holds ${h.held}`);
  }
  const pendingOut = await sql<{ wallet_id: string; balance: string; pending: string }>`
    SELECT a.wallet_id, a.balance,
           coalesce((SELECT sum(amount) FROM transactions t WHERE t.wallet_id = a.wallet_id
                      AND t.status = 'pending' AND t.type IN ('withdrawal', 'payout')), 0) AS pending
      FROM ledger_accounts a WHERE a.kind = 'pending_out'`.execute(db);
  for (const p of pendingOut.rows) {
    if (!new Dec(p.balance).eq(p.pending))
      problems.push(`wallet ${p.wallet_id} pending_out ${p.balance} != ${p.pending}`);
  }
  return { problems, accounts };
}
