/**
 * Queries on the double-entry ledger: accounts, their balances and the
 * database functions that post transfers: `ledger_post` (migration 0001) and
 * `ledger_post_groups` (migration 0009, group commit).
 * Every function takes the database or a transaction; the rules are in
 * domain/ledger/ledger.ts.
 */
import { randomUUID } from 'node:crypto';
import { type Kysely, sql, type Transaction } from 'kysely';
import type { BillingDB, WalletAccountKind } from './schema.ts';

type Db = Kysely<BillingDB> | Transaction<BillingDB>;

const WALLET_KINDS: readonly WalletAccountKind[] = ['available', 'locked', 'pending_out'];

/** Creates a wallet's sub-accounts (available, locked, pending_out), all starting at zero. */
export async function createWalletAccounts(trx: Db, walletId: string): Promise<void> {
  await trx
    .insertInto('ledger_accounts')
    .values(WALLET_KINDS.map((kind) => ({ id: randomUUID(), wallet_id: walletId, kind, non_negative: true })))
    .execute();
}

/** The sub-account IDs of these wallets. */
export async function walletAccountIds(trx: Db, walletIds: string[]) {
  return trx
    .selectFrom('ledger_accounts')
    .select(['id', 'wallet_id', 'kind'])
    .where('wallet_id', 'in', walletIds)
    .execute();
}

/** One transfer row as `ledger_post` takes it (amount a decimal string at the ledger's scale). */
export interface TransferRow {
  id: string;
  debit_account_id: string;
  credit_account_id: string;
  amount: string;
  code: string;
  transaction_id: string | null;
  hold_id: string | null;
  reverses_transfer_id: string | null;
}

/**
 * Posts transfers in one statement (`ledger_post`: locks the accounts in ID order, refuses an overdraft with
 * SQLSTATE BL402, amounts finer than the scale with BL400, inserts the transfers and updates the balances).
 */
export async function postLedgerRows(trx: Db, rows: TransferRow[]): Promise<void> {
  const col = <K extends keyof TransferRow>(k: K) => rows.map((r) => r[k]);
  await sql`SELECT ledger_post(${col('id')}::uuid[], ${col('debit_account_id')}::uuid[],
        ${col('credit_account_id')}::uuid[], ${col('amount')}::numeric[], ${col('code')}::text[],
        ${col('transaction_id')}::uuid[], ${col('hold_id')}::uuid[], ${col('reverses_transfer_id')}::uuid[])`.execute(
    trx,
  );
}

/** A group `ledger_post_groups` refused: BL400 (its amounts) or BL402 (an overdraft of `account_id`). */
export interface GroupRefusal {
  group_index: number;
  refusal: 'BL400' | 'BL402';
  message: string;
  account_id: string | null;
  wallet_id: string | null;
  kind: string | null;
  /** The account's balance before the group (BL402), at the ledger's scale. */
  available: string | null;
  /** The group's net debit of the account (BL402), at the ledger's scale. */
  needed: string | null;
}

/**
 * Posts independent groups of transfers in one statement, so one commit (`ledger_post_groups`): `groups[i]` is all
 * or nothing and is taken after the groups before it; a refused group leaves the others alone. Answers the refused
 * groups (by index into `groups`); every other group was posted. An unknown account fails the whole statement
 * (BL404), as does anything else that stops it: then nothing is written.
 */
export async function postLedgerGroups(db: Kysely<BillingDB>, groups: TransferRow[][]): Promise<GroupRefusal[]> {
  const rows = groups.flatMap((g, i) => g.map((r) => ({ ...r, group: i })));
  const col = <K extends keyof (typeof rows)[number]>(k: K) => rows.map((r) => r[k]);
  const { rows: refused } = await sql<GroupRefusal>`SELECT * FROM ledger_post_groups(${col('group')}::int[],
        ${col('id')}::uuid[], ${col('debit_account_id')}::uuid[], ${col('credit_account_id')}::uuid[],
        ${col('amount')}::numeric[], ${col('code')}::text[], ${col('transaction_id')}::uuid[], ${col('hold_id')}::uuid[],
        ${col('reverses_transfer_id')}::uuid[])`.execute(db);
  return refused;
}

/** The balances of a wallet's sub-accounts (none for an unknown wallet). */
export async function walletAccountBalances(db: Db, walletId: string) {
  return db.selectFrom('ledger_accounts').select(['kind', 'balance']).where('wallet_id', '=', walletId).execute();
}

/** Locks a wallet's sub-accounts (in ID order, like ledger_post) until the transaction ends; their balances. */
export async function lockWalletAccounts(trx: Transaction<BillingDB>, walletId: string) {
  return trx
    .selectFrom('ledger_accounts')
    .select(['kind', 'balance'])
    .where('wallet_id', '=', walletId)
    .orderBy('id')
    .forUpdate()
    .execute();
}

/** The sum of transfers coded `code` into a wallet's `available` account (a decimal string). */
export async function creditedToAvailable(db: Db, walletId: string, code: string): Promise<string> {
  const row = await db
    .selectFrom('ledger_transfers as t')
    .innerJoin('ledger_accounts as a', 'a.id', 't.credit_account_id')
    .select(sql<string>`coalesce(sum(t.amount), 0)`.as('sum'))
    .where('a.wallet_id', '=', walletId)
    .where('a.kind', '=', 'available')
    .where('t.code', '=', code)
    .executeTakeFirstOrThrow();
  return row.sum;
}

/** The ID of the transfer coded `code` that belongs to a transaction record. */
export async function transferIdOf(trx: Db, transactionId: string, code: string): Promise<string> {
  const row = await trx
    .selectFrom('ledger_transfers')
    .select(['id'])
    .where('transaction_id', '=', transactionId)
    .where('code', '=', code)
    .executeTakeFirstOrThrow();
  return row.id;
}

/** Sets the connection's lock and statement timeouts (PostgreSQL intervals such as '5s') until reset. */
export async function setSessionTimeouts(db: Kysely<BillingDB>, lock: string, statement: string): Promise<void> {
  await sql`SELECT set_config('lock_timeout', ${lock}, false),
                   set_config('statement_timeout', ${statement}, false)`.execute(db);
}

/** Gives the connection back its default lock and statement timeouts. */
export async function resetSessionTimeouts(db: Kysely<BillingDB>): Promise<void> {
  await sql`RESET lock_timeout`.execute(db);
  await sql`RESET statement_timeout`.execute(db);
}
