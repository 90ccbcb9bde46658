/**
 * Provider earnings. Session payments credit a provider wallet's `available`
 * account with transfers coded `EARNINGS_TRANSFER_CODE`; payouts send them on
 * chain. The summary is read from the ledger and the records.
 */
import type { Kysely } from 'kysely';
import { creditedToAvailable } from '../../db/ledger-repository.ts';
import type { BillingDB } from '../../db/schema.ts';
import { payoutTotals } from '../../db/transaction-repository.ts';
import { formatAmount, walletBalances } from '../ledger/index.ts';
import type { Wallet } from './wallets.ts';

/** Transfer code of a provider's share of a session payment. */
export const EARNINGS_TRANSFER_CODE = 'provider_earnings';

/** A provider's earnings; amounts at the token's scale. */
export interface EarningsSummary {
  providerId: string;
  walletId: string;
  totalEarned: string;
  totalPaidOut: string;
  pendingPayouts: string;
  availableForPayout: string;
  locked: string;
  minimumPayout: string;
}

export async function earningsSummary(
  db: Kysely<BillingDB>,
  wallet: Wallet,
  scale: number,
  minimumPayout: string,
): Promise<EarningsSummary> {
  const earned = await creditedToAvailable(db, wallet.id, EARNINGS_TRANSFER_CODE);
  const payouts = await payoutTotals(db, wallet.id);
  const balances = await walletBalances(db, wallet.id, scale);
  return {
    providerId: wallet.ownerId,
    walletId: wallet.id,
    totalEarned: formatAmount(earned, scale),
    totalPaidOut: formatAmount(payouts.paid, scale),
    pendingPayouts: formatAmount(payouts.pending, scale),
    availableForPayout: balances?.available ?? formatAmount('0', scale),
    locked: balances?.locked ?? formatAmount('0', scale),
    minimumPayout: formatAmount(minimumPayout, scale),
  };
}
