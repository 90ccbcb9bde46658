/** Well-known IDs of the ledger's system accounts (one each), inserted by migration 0001 and never changed. */
export const SYSTEM_ACCOUNT_IDS = {
  chain_incoming: '00000000-0000-4000-8000-000000000001',
  chain_outgoing: '00000000-0000-4000-8000-000000000002',
  platform_fees: '00000000-0000-4000-8000-000000000003',
} as const;
