/**
 * Who owns a provider machine. The provider registry knows (its record's `owner_id`); billing asks it through a
 * `ProviderDirectory` (adapters/provider-registry.ts) when a provider wallet is made and when rates are set, and
 * keeps the answer on the provider wallet (`holder_id`) and on each session (`provider_owner_id`), so the hot paths
 * (usage reports) never ask.
 */
import { billingErrors } from '../../errors.ts';
import type { BillingContext } from '../context.ts';

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
