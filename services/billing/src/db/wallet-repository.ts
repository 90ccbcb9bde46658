/** Queries on wallets. Every function takes the database or a transaction. */
import { lockName } from '@gpu/common';
import { type Kysely, type Selectable, sql, type Transaction } from 'kysely';
import type { KeysetPosition } from '../domain/keyset.ts';
import { cursorAt, newerThan } from './keyset-sql.ts';
import type { BillingDB, OwnerType, WalletTable } from './schema.ts';

type Db = Kysely<BillingDB> | Transaction<BillingDB>;

export type WalletRow = Selectable<WalletTable>;

/** Writes a wallet; its row as stored (a unique violation on `wallets_owner_unique` when the owner has one). */
export async function insertWallet(
  db: Db,
  values: {
    id: string;
    owner_type: OwnerType;
    owner_id: string;
    holder_id: string | null;
    solana_address: string | null;
  },
): Promise<WalletRow> {
  return db.insertInto('wallets').values(values).returningAll().executeTakeFirstOrThrow();
}

export async function findWallet(db: Db, id: string): Promise<WalletRow | undefined> {
  return db.selectFrom('wallets').selectAll().where('id', '=', id).executeTakeFirst();
}

/** The wallets a user holds, oldest first, from after `after` (one more than `limit`: whether a page follows). */
export async function listHeldWallets(
  db: Db,
  holderId: string,
  after: KeysetPosition | undefined,
  limit: number,
): Promise<(WalletRow & { cursor_at: string })[]> {
  let query = db
    .selectFrom('wallets')
    .selectAll()
    .select(cursorAt('created_at').as('cursor_at'))
    .where('holder_id', '=', holderId);
  if (after) query = query.where(newerThan('created_at', after));
  return query.orderBy('created_at', 'asc').orderBy('id', 'asc').limit(limit).execute();
}

/** The owner's wallet of the given type. */
export async function findWalletByOwnerRow(
  db: Db,
  ownerType: OwnerType,
  ownerId: string,
): Promise<WalletRow | undefined> {
  return db
    .selectFrom('wallets')
    .selectAll()
    .where('owner_type', '=', ownerType)
    .where('owner_id', '=', ownerId)
    .executeTakeFirst();
}

/** Stores a wallet's pending address challenge (replacing any earlier one). */
export async function setAddressChallenge(db: Db, id: string, challenge: string, expiresAt: Date): Promise<void> {
  await db
    .updateTable('wallets')
    .set({ address_challenge: challenge, address_challenge_expires_at: expiresAt })
    .where('id', '=', id)
    .execute();
}

/**
 * Marks the address proven by the answer to `challenge`, once: only while that challenge is still the wallet's
 * (a concurrent proof or a newer challenge wins). The row after the change, or undefined when it did not apply.
 */
export async function markAddressProven(
  db: Db,
  id: string,
  challenge: string,
  at: Date,
): Promise<WalletRow | undefined> {
  return db
    .updateTable('wallets')
    .set({ address_proven_at: at, address_challenge: null, address_challenge_expires_at: null })
    .where('id', '=', id)
    .where('address_challenge', '=', challenge)
    .returningAll()
    .executeTakeFirst();
}

/**
 * Serialises the proofs of one address until the transaction ends (a transaction-scoped advisory lock on it): the
 * check that no other holder proved it and the proof are one step.
 */
export async function lockAddressProofs(trx: Transaction<BillingDB>, address: string): Promise<void> {
  await lockName(trx, `address-proof:${address}`);
}

/** Holders of other wallets that proved `address` (null holder: an admin's or service's wallet). */
export async function otherProvenHolders(db: Db, address: string, walletId: string): Promise<(string | null)[]> {
  const rows = await db
    .selectFrom('wallets')
    .select('holder_id')
    .where('solana_address', '=', address)
    .where('address_proven_at', 'is not', null)
    .where('id', '<>', walletId)
    .execute();
  return rows.map((r) => r.holder_id);
}

/** Sets (an address) or clears (null) a provider wallet's automatic payout, with a clean slate of failures. */
export async function setAutoPayoutTo(db: Db, id: string, address: string | null): Promise<WalletRow> {
  return db
    .updateTable('wallets')
    .set({
      auto_payout_to: address,
      auto_payout_failures: 0,
      auto_payout_retry_at: null,
      auto_payout_last_failure: null,
    })
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** The wallet's automatic payout address, its row locked until the transaction ends. */
export async function lockAutoPayoutTo(trx: Transaction<BillingDB>, id: string): Promise<string | null> {
  const row = await trx
    .selectFrom('wallets')
    .select('auto_payout_to')
    .where('id', '=', id)
    .forUpdate()
    .executeTakeFirst();
  return row?.auto_payout_to ?? null;
}

/**
 * Records the outcome of an automatic payout: a success (null) clears the failures, a failure counts one more, sets
 * the next attempt and keeps why.
 */
export async function recordAutoPayoutOutcome(
  db: Db,
  id: string,
  failure: { retryAt: Date; reason: string } | null,
): Promise<void> {
  await db
    .updateTable('wallets')
    .set((eb) =>
      failure
        ? {
            auto_payout_failures: eb('auto_payout_failures', '+', 1),
            auto_payout_retry_at: failure.retryAt,
            auto_payout_last_failure: failure.reason,
          }
        : { auto_payout_failures: 0, auto_payout_retry_at: null, auto_payout_last_failure: null },
    )
    .where('id', '=', id)
    .execute();
}

/**
 * Wallets with automatic payout on, due now (not waiting out a failure), whose available balance is at least
 * `minimum`: those never tried first, then by their next attempt.
 */
export async function walletsDueForAutoPayout(db: Db, minimum: string, now: Date, limit: number): Promise<WalletRow[]> {
  return db
    .selectFrom('wallets')
    .innerJoin('ledger_accounts', (j) =>
      j.onRef('ledger_accounts.wallet_id', '=', 'wallets.id').on('ledger_accounts.kind', '=', 'available'),
    )
    .selectAll('wallets')
    .where('wallets.auto_payout_to', 'is not', null)
    .where((eb) =>
      eb.or([eb('wallets.auto_payout_retry_at', 'is', null), eb('wallets.auto_payout_retry_at', '<=', now)]),
    )
    .where('ledger_accounts.balance', '>=', minimum)
    .orderBy(sql`wallets.auto_payout_retry_at NULLS FIRST`)
    .orderBy('wallets.created_at')
    .limit(limit)
    .execute();
}
