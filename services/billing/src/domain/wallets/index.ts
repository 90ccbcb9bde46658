export { issueAddressChallenge, proveAddress } from './address-proof.ts';
export {
  type AutoPayoutSetting,
  autoPayoutSetting,
  nudgeAutoPayout,
  setAutoPayout,
  settleAutoPayouts,
  sweepAutoPayouts,
} from './auto-payout.ts';
export { claimDeposit } from './deposits.ts';
export { EARNINGS_TRANSFER_CODE, type EarningsSummary, earningsSummary } from './earnings.ts';
export { findTransaction, listTransactions, type TransactionRow } from './history.ts';
export { startChainPayout } from './payouts.ts';
export { findProviderAccount, providerAccount, providerWalletOf } from './provider-accounts.ts';
export { registryOwner } from './provider-owners.ts';
export { reconcilePending } from './reconcile.ts';
export { findWalletByOwner, heldWallets, openWallet, type Wallet, walletFor } from './wallets.ts';
