/** Transaction records (the history users see) and their JSON shape. */
import type { TransactionRow } from '../db/transaction-repository.ts';
import { formatAmount } from './money.ts';

export { getTransaction, type TransactionRow } from '../db/transaction-repository.ts';

/** The JSON of a transaction record (snake_case, decimal strings, RFC 3339 UTC). */
export interface TransactionJson {
  id: string;
  wallet_id: string;
  type: TransactionRow['type'];
  status: TransactionRow['status'];
  amount: string;
  fee: string;
  signature: string | null;
  destination: string | null;
  failure_reason: string | null;
  hold_id: string | null;
  reference: string | null;
  created_at: string;
  updated_at: string;
  confirmed_at: string | null;
}

const iso = (d: Date | string) => new Date(d).toISOString();

export function transactionJson(row: TransactionRow, scale: number): TransactionJson {
  return {
    id: row.id,
    wallet_id: row.wallet_id,
    type: row.type,
    status: row.status,
    amount: formatAmount(row.amount, scale),
    fee: formatAmount(row.fee, scale),
    signature: row.signature,
    destination: row.destination,
    failure_reason: row.failure_reason,
    hold_id: row.hold_id,
    reference: row.reference,
    created_at: iso(row.created_at),
    updated_at: iso(row.updated_at),
    confirmed_at: row.confirmed_at ? iso(row.confirmed_at) : null,
  };
}
