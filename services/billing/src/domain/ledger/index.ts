export { createHold, getHold, getHolds, type Hold, postHold, topUpHold } from './holds.ts';
export { createWalletAccounts, lockWalletAvailable, postTransfers, walletBalances } from './ledger.ts';
export { AmountFormatError, Dec, formatAmount, parseAmount, roundAmount, splitFee } from './money.ts';
