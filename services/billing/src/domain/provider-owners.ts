/**
 * Who owns a provider machine. The provider registry knows (its record's `owner_id`); billing asks it through a
 * `ProviderDirectory` (adapters/provider-registry.ts) when a provider wallet is made and when rates are set, and
 * keeps the answer on the provider wallet (`holder_id`) and on each session (`provider_owner_id`), so the hot paths
 * (usage reports) never ask.
 */
import { findWalletByOwnerRow } from '../db/wallet-repository.ts';
import { billingErrors } from '../errors.ts';
import type { BillingContext } from './context.ts';

/**
 * The owner of a provider machine: its wallet's holder where billing has one, else the registry's answer.
 * PROVIDER_NOT_FOUND when the registry does not know it; null when billing has no registry to ask (only admins and
 * services then act on the provider's account).
 */
export async function providerOwner(
  ctx: BillingContext,
  providerId: string,
  correlationId?: string,
): Promise<string | null> {
  const wallet = await findWalletByOwnerRow(ctx.db, 'provider', providerId);
  if (wallet?.holder_id) return wallet.holder_id;
  return registryOwner(ctx, providerId, correlationId);
}

/** The registry's owner of a provider machine (PROVIDER_NOT_FOUND when unknown; null without a registry). */
export async function registryOwner(
  ctx: BillingContext,
  providerId: string,
  correlationId?: string,
): Promise<string | null> {
  if (!ctx.providers) return null;
  const owner = await ctx.providers.ownerOf(providerId, correlationId);
  if (owner === null) throw billingErrors.providerNotFound(providerId);
  return owner;
}
