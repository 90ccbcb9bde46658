/**
 * The double-entry ledger. Every balance change is an immutable transfer of a
 * positive amount from a debit account to a credit account; an account's
 * balance is its credits minus its debits and is updated in the same statement
 * as the transfer rows (the `ledger_post` database function, migration 0001).
 * Wallet accounts (available, locked, pending_out) may never go below zero:
 * `ledger_post` locks every account it touches with SELECT ... FOR UPDATE in
 * ascending ID order (so concurrent posts never deadlock), refuses an
 * overdraft (INSUFFICIENT_FUNDS), and the table's CHECK constraint refuses
 * it again should any code path skip the check. Transfers posted on their own
 * (not with other rows in a caller's transaction) can share one statement and
 * one commit with concurrent ones: group-commit.ts.
 */
import { randomUUID } from 'node:crypto';
import type { Kysely, Transaction } from 'kysely';
import {
  createWalletAccounts,
  lockWalletAccounts,
  postLedgerRows,
  type TransferRow,
  walletAccountBalances,
  walletAccountIds,
} from '../../db/ledger-repository.ts';
import type { BillingDB, SystemAccountKind, WalletAccountKind } from '../../db/schema.ts';
import { SYSTEM_ACCOUNT_IDS } from '../../db/system-accounts.ts';
import { billingErrors } from '../../errors.ts';
import type { BoundedCache } from '../bounded-cache.ts';
import { Dec, formatAmount } from './money.ts';

export { createWalletAccounts };

/** A reference to a ledger account: one of a wallet's sub-accounts, or a system account. */
export type AccountRef = { wallet: string; kind: WalletAccountKind } | { system: SystemAccountKind };

export interface TransferSpec {
  debit: AccountRef;
  credit: AccountRef;
  amount: Dec;
  /** What the transfer is for: `deposit`, `hold`, `hold_release`, `withdrawal_reversal`, ... */
  code: string;
  transactionId?: string | null;
  holdId?: string | null;
  reversesTransferId?: string | null;
}

export interface PostedTransfer {
  id: string;
  debitAccountId: string;
  creditAccountId: string;
  amount: string;
  code: string;
}

type Db = Kysely<BillingDB> | Transaction<BillingDB>;

const refKey = (ref: AccountRef) => ('system' in ref ? `system:${ref.system}` : `${ref.wallet}:${ref.kind}`);

/**
 * The account IDs of `refs`, by refKey; wallet accounts that do not exist are absent. Wallet account IDs never
 * change and accounts are never deleted, so the (wallet, kind) -> ID mapping is kept in the context's cache
 * (`accountIds`, bounded) when one is given, saving a query per transfer.
 */
async function resolveAccounts(
  trx: Db,
  refs: AccountRef[],
  accountIds: BoundedCache<string> | undefined,
): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  const missing = new Set<string>();
  for (const ref of refs) {
    const key = refKey(ref);
    const id = 'system' in ref ? SYSTEM_ACCOUNT_IDS[ref.system] : accountIds?.get(key);
    if (id) out.set(key, id);
    else if ('wallet' in ref) missing.add(ref.wallet);
  }
  if (missing.size === 0) return out;
  const rows = await walletAccountIds(trx, [...missing]);
  accountIds?.reserve(rows.length);
  for (const row of rows) {
    const key = `${row.wallet_id}:${row.kind}`;
    accountIds?.set(key, row.id);
    out.set(key, row.id);
  }
  return out;
}

/** Whether an error is the database refusing an overdraft (the CHECK constraint). */
function isOverdraftViolation(err: unknown): boolean {
  const e = err as { code?: string; constraint?: string; message?: string };
  return (
    e?.code === '23514' &&
    (e.constraint === 'ledger_accounts_non_negative' || /ledger_accounts_non_negative/.test(e.message ?? ''))
  );
}

/**
 * Posts transfers atomically, in one statement (the `ledger_post` database
 * function): it locks the accounts in ID order, refuses an overdraft of any
 * non-negative account (net of the whole batch) with INSUFFICIENT_FUNDS
 * naming the wallet, refuses amounts finer than the ledger's scale (derived
 * amounts must be rounded first: money.ts), inserts the transfers and updates
 * the balances. Run it inside the caller's transaction to commit other rows
 * with it, or on its own: a single statement is atomic by itself (though
 * transfers posted on their own go faster grouped with concurrent ones:
 * `postTransferGroup`, group-commit.ts).
 * `accountIds` is the context's cache of account IDs (state.accountIds).
 */
export async function postTransfers(
  trx: Db,
  specs: TransferSpec[],
  accountIds?: BoundedCache<string>,
): Promise<PostedTransfer[]> {
  if (specs.length === 0) return [];
  const rows = await transferRows(trx, specs, accountIds);
  try {
    await postLedgerRows(trx, rows);
  } catch (err) {
    throw ledgerError(err);
  }
  return postedTransfers(rows);
}

/**
 * The rows `ledger_post` and `ledger_post_groups` take for `specs`: amounts checked positive, account IDs resolved
 * (WALLET_NOT_FOUND for a wallet without accounts), a new ID per transfer.
 */
export async function transferRows(
  db: Db,
  specs: TransferSpec[],
  accountIds: BoundedCache<string> | undefined,
): Promise<TransferRow[]> {
  const refs = new Map<string, AccountRef>();
  for (const s of specs) {
    if (!s.amount.isPositive() || s.amount.isZero()) throw new Error(`transfer amount must be positive: ${s.amount}`);
    refs.set(refKey(s.debit), s.debit);
    refs.set(refKey(s.credit), s.credit);
  }
  const ids = await resolveAccounts(db, [...refs.values()], accountIds);
  const idOf = (ref: AccountRef): string => {
    const id = ids.get(refKey(ref));
    if (!id) throw billingErrors.walletNotFound('wallet' in ref ? ref.wallet : ref.system);
    return id;
  };
  return specs.map((s) => ({
    id: randomUUID(),
    debit_account_id: idOf(s.debit),
    credit_account_id: idOf(s.credit),
    amount: s.amount.toFixed(),
    code: s.code,
    transaction_id: s.transactionId ?? null,
    hold_id: s.holdId ?? null,
    reverses_transfer_id: s.reversesTransferId ?? null,
  }));
}

/** The posted transfers of rows. */
export function postedTransfers(rows: TransferRow[]): PostedTransfer[] {
  return rows.map((r) => ({
    id: r.id,
    debitAccountId: r.debit_account_id,
    creditAccountId: r.credit_account_id,
    amount: r.amount,
    code: r.code,
  }));
}

/** What the database says of a refused overdraft: the account, its balance and the net debit it was asked for. */
export interface OverdraftDetail {
  wallet_id?: string | null;
  kind?: string | null;
  available?: string | null;
  needed?: string | null;
}

/** INSUFFICIENT_FUNDS naming the wallet (or the account kind), what it has and what was needed. */
export function insufficientFunds(d: OverdraftDetail) {
  // NUMERIC(38, scale) text has exactly `scale` decimals: answer at the same scale.
  const scale = (d.available?.split('.')[1] ?? '').length;
  return billingErrors.insufficientFunds(
    d.wallet_id ?? d.kind ?? 'account',
    d.available ?? '0',
    new Dec(d.needed ?? 0).toFixed(scale),
  );
}

/** The error for amounts the ledger refused (not positive, finer than its scale): a bug, not a user's mistake. */
export function refusedAmounts(message: string): Error {
  return new Error(`ledger refused the amounts: ${message}`);
}

/** Maps the errors `ledger_post` raises to the service's errors. */
function ledgerError(err: unknown): unknown {
  const e = err as { code?: string; detail?: string; message?: string };
  if (e?.code === 'BL402') return insufficientFunds(JSON.parse(e.detail ?? '{}') as OverdraftDetail);
  if (e?.code === 'BL400') return refusedAmounts(e.message ?? '');
  if (isOverdraftViolation(err)) return billingErrors.overdraftRefused();
  return err;
}

/** Balances of one wallet's sub-accounts (decimal strings at the scale). */
export interface WalletBalances {
  available: string;
  locked: string;
  pending: string;
  total: string;
}

/** Reads a wallet's balances; null when the wallet has no accounts (unknown wallet). */
export async function walletBalances(db: Db, walletId: string, scale: number): Promise<WalletBalances | null> {
  const rows = await walletAccountBalances(db, walletId);
  if (rows.length === 0) return null;
  const of = (kind: string) => new Dec(rows.find((r) => r.kind === kind)?.balance ?? 0);
  const available = of('available');
  const locked = of('locked');
  return {
    available: formatAmount(available, scale),
    locked: formatAmount(locked, scale),
    pending: formatAmount(of('pending_out'), scale),
    total: formatAmount(available.plus(locked), scale),
  };
}

/** Locks a wallet's ledger accounts (in ID order, like ledger_post) and returns its available balance. */
export async function lockWalletAvailable(trx: Transaction<BillingDB>, walletId: string): Promise<Dec> {
  const rows = await lockWalletAccounts(trx, walletId);
  return new Dec(rows.find((r) => r.kind === 'available')?.balance ?? 0);
}
