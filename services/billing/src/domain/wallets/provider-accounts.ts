/**
 * A provider machine's account in billing (its provider wallet: earnings, payouts, the payout setting), as the routes
 * keyed by a provider ID reach it. Who may use it is decided before anything is read out of it: provider IDs are the
 * registry's machine IDs, which renters and the scheduler see, so a caller who is not the machine's owner gets the
 * same 403 whether or not the machine has a wallet (a 404 `WALLET_NOT_FOUND` would tell outsiders which machines
 * have earned money).
 */
import type { Principal } from '@gpu/common';
import { billingErrors } from '../../errors.ts';
import { mayUseProviderAccount, notProviderOwner, type ProviderAccess } from '../access.ts';
import type { BillingContext } from '../context.ts';
import type { ProviderRecord } from '../provider-directory.ts';
import { registryOwner } from './provider-owners.ts';
import { createWallet, findWalletByOwner, type Wallet } from './wallets.ts';

/**
 * The machine's provider wallet for an actor who may use it as `access` says, or null when it has none yet (told only
 * to the machine's owner and the privileged). Anyone else: 403 NOT_PROVIDER_OWNER, or 404 PROVIDER_NOT_FOUND when the
 * registry does not know the machine, whether or not billing holds a wallet for it. The wallet's holder decides
 * while it exists; otherwise the registry's owner (without a registry, only admins and services).
 */
export async function findProviderAccount(
  ctx: BillingContext,
  actor: Principal,
  providerId: string,
  access: ProviderAccess,
  correlationId?: string,
): Promise<Wallet | null> {
  const wallet = await findWalletByOwner(ctx.db, 'provider', providerId);
  if (mayUseProviderAccount(actor, wallet ? wallet.holderId : null, access)) return wallet;
  // Not its holder: the same answer as for a machine without a wallet, so the wallet's existence stays unknown.
  const owner = await registryOwner(ctx, providerId, correlationId);
  if (wallet || !mayUseProviderAccount(actor, owner, access)) throw notProviderOwner(providerId);
  return null;
}

/** The machine's provider wallet for an actor who may use it; 404 WALLET_NOT_FOUND (to them only) when it has none. */
export async function providerAccount(
  ctx: BillingContext,
  actor: Principal,
  providerId: string,
  access: ProviderAccess,
  correlationId?: string,
): Promise<Wallet> {
  const wallet = await findProviderAccount(ctx, actor, providerId, access, correlationId);
  if (!wallet) throw billingErrors.providerWalletNotFound(providerId);
  return wallet;
}

/** The machine's provider wallet, opened for its owner (without an address yet) when it has none. */
export async function providerWalletOf(ctx: BillingContext, machine: ProviderRecord): Promise<Wallet> {
  const existing = await findWalletByOwner(ctx.db, 'provider', machine.id);
  if (existing) return existing;
  try {
    return await createWallet(ctx.db, {
      ownerType: 'provider',
      ownerId: machine.id,
      holderId: machine.ownerId,
      solanaAddress: null,
    });
  } catch (err) {
    // Opened by a concurrent first session.
    const now = await findWalletByOwner(ctx.db, 'provider', machine.id);
    if (now) return now;
    throw err;
  }
}
