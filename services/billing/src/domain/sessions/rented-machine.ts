/**
 * What a session rents, from the provider registry's record of the machine (when billing has a registry):
 * the machine must be known (404 PROVIDER_NOT_FOUND) and available (`idle`, with enough healthy GPUs of the model:
 * 409 PROVIDER_NOT_AVAILABLE), and the session is priced from the record (the GPUs' model as the driver prints it,
 * their VRAM and power), never from what the renter declares. Its earnings go to the machine's provider wallet
 * (provider-accounts.ts: `providerWalletOf`).
 */
import { gpuModelKey } from '@gpu/common';
import { billingErrors } from '../../errors.ts';
import type { BillingContext } from '../context.ts';
import type { ProviderGpu, ProviderRecord } from '../provider-directory.ts';

/** The resources a session prices. */
export interface RentedResources {
  gpuModel: string;
  gpuCount: number;
  requestedVramMb: number;
  estimatedPowerW: number;
}

/**
 * The GPUs a rental takes on the machine, priced from the record: a session rents the whole machine (it holds the
 * machine's reservation, and the registry shows the machine busy), so it takes, and pays for, every healthy GPU of
 * the asked model (by model key, so `H100` finds `NVIDIA H100 80GB HBM3`; else of the machine's model when it has
 * only one), at least `asked.gpuCount` of them: asking for one GPU of a four-GPU machine rents and prices all four.
 * Otherwise one renter could keep a whole machine off the market at the price of one GPU.
 */
export function rentOn(machine: ProviderRecord, asked: RentedResources): RentedResources {
  if (machine.status !== 'idle') {
    throw billingErrors.providerNotAvailable(machine.id, `is ${machine.status}, not idle`, machine.status);
  }
  return gpusFor(machine, asked);
}

/** The resources a rental of the machine would price, whatever its status now (a quote). */
function gpusFor(machine: ProviderRecord, asked: RentedResources): RentedResources {
  const healthy = machine.gpus.filter((g) => g.healthy);
  const byModel = new Map<string, ProviderGpu[]>();
  for (const g of healthy) {
    const key = gpuModelKey(g.model);
    byModel.set(key, [...(byModel.get(key) ?? []), g]);
  }
  const wanted = byModel.get(gpuModelKey(asked.gpuModel)) ?? (byModel.size === 1 ? [...byModel.values()][0]! : []);
  if (wanted.length < asked.gpuCount) {
    throw billingErrors.providerNotAvailable(
      machine.id,
      `has ${wanted.length} healthy GPU(s) of model ${asked.gpuModel}, ${asked.gpuCount} asked`,
      machine.status,
    );
  }
  const taken = wanted;
  const power = taken.every((g) => g.powerW !== null)
    ? taken.reduce((sum, g) => sum + (g.powerW ?? 0), 0)
    : asked.estimatedPowerW;
  return {
    gpuModel: taken[0]!.model,
    gpuCount: taken.length,
    requestedVramMb: taken.reduce((sum, g) => sum + g.vramMb, 0),
    estimatedPowerW: power,
  };
}

/**
 * What a quote for this machine prices: with a registry, the machine's record (as a session start would; 404
 * PROVIDER_NOT_FOUND for a machine it does not know), else the figures asked.
 */
export async function quotedResources(
  ctx: BillingContext,
  providerId: string | undefined,
  asked: RentedResources,
  correlationId?: string,
): Promise<RentedResources> {
  if (!providerId || !ctx.providers) return asked;
  const machine = await ctx.providers.provider(providerId, correlationId);
  if (!machine) throw billingErrors.providerNotFound(providerId);
  return gpusFor(machine, asked);
}
