/** Kysely table types of the billing database (NUMERIC columns are decimal strings). */
import type { ColumnType, Generated } from 'kysely';

type Timestamp = ColumnType<Date, Date | string | undefined, Date | string>;
type Money = ColumnType<string, string, string>;

export type OwnerType = 'user' | 'provider';
export type WalletAccountKind = 'available' | 'locked' | 'pending_out';
export type SystemAccountKind = 'chain_incoming' | 'chain_outgoing' | 'platform_fees';
export type AccountKind = WalletAccountKind | SystemAccountKind;
export type TransactionType = 'deposit' | 'withdrawal' | 'payment' | 'payout' | 'fee' | 'lock' | 'release';
export type TransactionStatus = 'pending' | 'confirmed' | 'failed';
export type HoldStatus = 'pending' | 'posted' | 'voided';

export interface WalletTable {
  id: string;
  owner_type: OwnerType;
  owner_id: string;
  solana_address: string;
  created_at: Timestamp;
}

export interface LedgerAccountTable {
  id: string;
  wallet_id: string | null;
  kind: AccountKind;
  non_negative: boolean;
  balance: Generated<string>;
  debits_total: Generated<string>;
  credits_total: Generated<string>;
  created_at: Timestamp;
}

export interface HoldTable {
  id: string;
  wallet_id: string;
  status: HoldStatus;
  amount: Money;
  posted: Generated<string>;
  released: Generated<string>;
  reference: string | null;
  created_at: Timestamp;
  updated_at: Timestamp;
}

export interface TransactionTable {
  id: string;
  wallet_id: string;
  type: TransactionType;
  status: TransactionStatus;
  amount: Money;
  fee: Generated<string>;
  signature: string | null;
  destination: string | null;
  serialized_tx: string | null;
  last_valid_block_height: number | null;
  failure_reason: string | null;
  hold_id: string | null;
  reference: string | null;
  created_at: Timestamp;
  updated_at: Timestamp;
  confirmed_at: Date | null;
}

export interface LedgerTransferTable {
  id: string;
  debit_account_id: string;
  credit_account_id: string;
  amount: Money;
  code: string;
  transaction_id: string | null;
  hold_id: string | null;
  reverses_transfer_id: string | null;
  created_at: Timestamp;
}

export interface IdempotencyKeyTable {
  key: string;
  request_hash: string;
  transaction_id: string | null;
  response_status: number | null;
  response_body: unknown;
  created_at: Timestamp;
}

export interface OutboxEventTable {
  id: string;
  kind: string;
  payload: unknown;
  correlation_id: string | null;
  created_at: Timestamp;
  published_at: Date | null;
}

export interface BillingMetaTable {
  key: string;
  value: string;
}

export interface BillingDB {
  billing_meta: BillingMetaTable;
  wallets: WalletTable;
  ledger_accounts: LedgerAccountTable;
  holds: HoldTable;
  transactions: TransactionTable;
  ledger_transfers: LedgerTransferTable;
  idempotency_keys: IdempotencyKeyTable;
  outbox_events: OutboxEventTable;
}
