/**
 * Wallets: one per owner (a user or a provider) and type, each with its
 * ledger sub-accounts created in the same transaction.
 */
import { randomUUID } from 'node:crypto';
import type { Kysely } from 'kysely';
import type { BillingDB, OwnerType } from '../db/schema.ts';
import { findWallet, findWalletByOwnerRow, insertWallet, type WalletRow } from '../db/wallet-repository.ts';
import { billingErrors } from '../errors.ts';
import { createWalletAccounts } from './ledger.ts';

export interface Wallet {
  id: string;
  ownerType: OwnerType;
  ownerId: string;
  solanaAddress: string;
  createdAt: Date;
}

const toWallet = (r: WalletRow): Wallet => ({
  id: r.id,
  ownerType: r.owner_type,
  ownerId: r.owner_id,
  solanaAddress: r.solana_address,
  createdAt: new Date(r.created_at),
});

const isUniqueViolation = (err: unknown, constraint: string) => {
  const e = err as { code?: string; constraint?: string; message?: string };
  return e?.code === '23505' && (e.constraint === constraint || (e.message ?? '').includes(constraint));
};

/** Creates a wallet; WALLET_ALREADY_EXISTS when the owner already has one of this type. */
export async function createWallet(
  db: Kysely<BillingDB>,
  input: { ownerType: OwnerType; ownerId: string; solanaAddress: string },
): Promise<Wallet> {
  const id = randomUUID();
  try {
    const row = await db.transaction().execute(async (trx) => {
      const inserted = await insertWallet(trx, {
        id,
        owner_type: input.ownerType,
        owner_id: input.ownerId,
        solana_address: input.solanaAddress,
      });
      await createWalletAccounts(trx, id);
      return inserted;
    });
    return toWallet(row);
  } catch (err) {
    if (!isUniqueViolation(err, 'wallets_owner_unique')) throw err;
    const existing = await findWalletByOwner(db, input.ownerType, input.ownerId);
    throw billingErrors.walletExists(input.ownerType, input.ownerId, existing?.id ?? '');
  }
}

/** The wallet with this ID; WALLET_NOT_FOUND when there is none. */
export async function getWallet(db: Kysely<BillingDB>, id: string): Promise<Wallet> {
  const row = await findWallet(db, id);
  if (!row) throw billingErrors.walletNotFound(id);
  return toWallet(row);
}

/** The owner's wallet of the given type, or null. */
export async function findWalletByOwner(
  db: Kysely<BillingDB>,
  ownerType: OwnerType,
  ownerId: string,
): Promise<Wallet | null> {
  const row = await findWalletByOwnerRow(db, ownerType, ownerId);
  return row ? toWallet(row) : null;
}
