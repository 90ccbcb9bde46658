/**
 * Provider earnings. Session payments (Billing II) credit a provider wallet's
 * `available` account with transfers coded `EARNINGS_TRANSFER_CODE`; payouts
 * send them on chain. The summary is read from the ledger and the records.
 */
import { type Kysely, sql } from 'kysely';
import type { BillingDB } from '../db/schema.ts';
import { walletBalances } from './ledger.ts';
import { formatAmount } from './money.ts';
import type { Wallet } from './wallets.ts';

/** Transfer code of a provider's share of a session payment. */
export const EARNINGS_TRANSFER_CODE = 'provider_earnings';

export interface EarningsSummary {
  provider_id: string;
  wallet_id: string;
  total_earned: string;
  total_paid_out: string;
  pending_payouts: string;
  available_for_payout: string;
  locked: string;
  minimum_payout: string;
}

export async function earningsSummary(
  db: Kysely<BillingDB>,
  wallet: Wallet,
  scale: number,
  minimumPayout: string,
): Promise<EarningsSummary> {
  const earned = await db
    .selectFrom('ledger_transfers as t')
    .innerJoin('ledger_accounts as a', 'a.id', 't.credit_account_id')
    .select(sql<string>`coalesce(sum(t.amount), 0)`.as('sum'))
    .where('a.wallet_id', '=', wallet.id)
    .where('a.kind', '=', 'available')
    .where('t.code', '=', EARNINGS_TRANSFER_CODE)
    .executeTakeFirstOrThrow();
  const payouts = await db
    .selectFrom('transactions')
    .select([
      sql<string>`coalesce(sum(amount) FILTER (WHERE status = 'confirmed'), 0)`.as('paid'),
      sql<string>`coalesce(sum(amount) FILTER (WHERE status = 'pending'), 0)`.as('pending'),
    ])
    .where('wallet_id', '=', wallet.id)
    .where('type', '=', 'payout')
    .executeTakeFirstOrThrow();
  const balances = await walletBalances(db, wallet.id, scale);
  return {
    provider_id: wallet.ownerId,
    wallet_id: wallet.id,
    total_earned: formatAmount(earned.sum, scale),
    total_paid_out: formatAmount(payouts.paid, scale),
    pending_payouts: formatAmount(payouts.pending, scale),
    available_for_payout: balances?.available ?? formatAmount('0', scale),
    locked: balances?.locked ?? formatAmount('0', scale),
    minimum_payout: formatAmount(minimumPayout, scale),
  };
}
