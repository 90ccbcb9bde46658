/**
 * Wallets: one per owner (a user or a provider) and type, each with its
 * ledger sub-accounts created in the same transaction.
 */
import { randomUUID } from 'node:crypto';
import { type KeysetPosition, keysetPage, type Page, type Principal } from '@gpu/common';
import type { Kysely } from 'kysely';
import type { BillingDB, OwnerType } from '../../db/schema.ts';
import { isUniqueViolation } from '../../db/unique-violation.ts';
import {
  findWallet,
  findWalletByOwnerRow,
  insertWallet,
  listHeldWallets,
  type WalletRow,
} from '../../db/wallet-repository.ts';
import { billingErrors } from '../../errors.ts';
import { assertMayCreateUserWallet, assertMayNameHolder, assertProviderOwner, assertWalletHolder } from '../access.ts';
import type { BillingContext } from '../context.ts';
import { createWalletAccounts } from '../ledger/index.ts';
import { registryOwner } from './provider-owners.ts';

export interface Wallet {
  id: string;
  ownerType: OwnerType;
  ownerId: string;
  /** The user who holds the wallet (null: not known, admins and services only). */
  holderId: string | null;
  /** Null only for a provider wallet opened on first need (payouts then name their destination). */
  solanaAddress: string | null;
  /** When the holder proved control of the address (address-proof.ts); null: not yet, no deposits. */
  addressProvenAt: Date | null;
  /** A provider wallet's automatic payout address (auto-payout.ts); null: off. */
  autoPayoutTo: string | null;
  /** Why its last automatic payout failed, and when it is tried again (null: it did not fail). */
  autoPayoutFailure: { reason: string | null; retryAt: Date } | null;
  createdAt: Date;
}

export const toWallet = (r: WalletRow): Wallet => ({
  id: r.id,
  ownerType: r.owner_type,
  ownerId: r.owner_id,
  holderId: r.holder_id,
  solanaAddress: r.solana_address,
  addressProvenAt: r.address_proven_at ? new Date(r.address_proven_at) : null,
  autoPayoutTo: r.auto_payout_to,
  autoPayoutFailure: r.auto_payout_retry_at
    ? { reason: r.auto_payout_last_failure, retryAt: new Date(r.auto_payout_retry_at) }
    : null,
  createdAt: new Date(r.created_at),
});

/** Creates a wallet; WALLET_ALREADY_EXISTS when the owner already has one of this type. */
export async function createWallet(
  db: Kysely<BillingDB>,
  input: { ownerType: OwnerType; ownerId: string; solanaAddress: string | null; holderId?: string | null },
): Promise<Wallet> {
  const id = randomUUID();
  try {
    const row = await db.transaction().execute(async (trx) => {
      const inserted = await insertWallet(trx, {
        id,
        owner_type: input.ownerType,
        owner_id: input.ownerId,
        holder_id: input.holderId !== undefined ? input.holderId : input.ownerType === 'user' ? input.ownerId : null,
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
async function getWallet(db: Kysely<BillingDB>, id: string): Promise<Wallet> {
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

/** A wallet to open: for a user (`ownerId` the user) or a provider machine (`ownerId` the registry's machine ID). */
export interface OpenWalletInput {
  ownerType: OwnerType;
  ownerId: string;
  solanaAddress: string;
  /** The holding user, named by an admin or service only (else: the user, or the machine's owner per the registry). */
  holderId?: string;
  correlationId?: string;
}

/**
 * Opens a wallet for the actor: a user opens their own user wallet; a provider machine's owner opens its provider
 * wallet (the owner is asked of the registry: PROVIDER_NOT_FOUND when it does not know the machine). Admins and
 * services open any, and may name the holder. An address a payout could never go to (the platform's own, a program,
 * a burn address: as far as known without asking the chain) is INVALID_DESTINATION.
 */
export async function openWallet(ctx: BillingContext, actor: Principal, input: OpenWalletInput): Promise<Wallet> {
  let holderId: string | null;
  if (input.holderId !== undefined) {
    assertMayNameHolder(actor);
    holderId = input.holderId;
  } else if (input.ownerType === 'user') {
    assertMayCreateUserWallet(actor, input.ownerId);
    holderId = input.ownerId;
  } else {
    holderId = await registryOwner(ctx, input.ownerId, input.correlationId);
    assertProviderOwner(actor, input.ownerId, holderId);
  }
  // The address is where withdrawals and payouts go by default: never one of the platform's own (or a program's).
  const problem = ctx.chain?.knownDestinationProblem(input.solanaAddress);
  if (problem) throw billingErrors.unfitDestination(input.solanaAddress, problem, 'body.solana_address');
  return createWallet(ctx.db, { ...input, holderId });
}

/** The wallet, for its holder (or an admin or service): WALLET_NOT_FOUND, or 403 NOT_WALLET_HOLDER for others. */
export async function walletFor(ctx: BillingContext, actor: Principal, id: string): Promise<Wallet> {
  const wallet = await getWallet(ctx.db, id);
  assertWalletHolder(actor, wallet);
  return wallet;
}

/**
 * One page of the wallets the actor holds, oldest first: a user's own user wallet and the provider wallets of their
 * machines. A machine client (a daemon, a service) holds none: its page is empty.
 */
export async function heldWallets(
  ctx: BillingContext,
  actor: Principal,
  page: { limit: number; after?: KeysetPosition },
): Promise<Page<Wallet>> {
  if (actor.kind !== 'user') return { items: [], nextCursor: null };
  const rows = keysetPage(await listHeldWallets(ctx.db, actor.subject, page.after, page.limit + 1), page.limit);
  return { items: rows.items.map(toWallet), nextCursor: rows.nextCursor };
}
