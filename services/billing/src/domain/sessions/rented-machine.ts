/**
 * What a session rents, from the provider registry's record of the machine (when billing has a registry): N of the
 * machine's GPUs, each addressed by its index in the record's `gpus` list. The machine must be known (404
 * PROVIDER_NOT_FOUND) and up (`idle`, or `busy` as the registry may still show a machine whose session just ended;
 * billing's own leases decide what is free) and not held off the market by its owner (`held`), the group asked for
 * at least the machine's `min_gpus_per_rental` (409 GPU_GROUP_TOO_SMALL), and enough of the model's healthy GPUs free (409 PROVIDER_NOT_AVAILABLE). The session is
 * priced from the record (the GPUs' model as the driver prints it, their VRAM and power), never from what the renter
 * declares. The choice is made under the machine's lease lock (db/gpu-lease-repository.ts), so two sessions never
 * hold one GPU.
 */
import { gpuModelKey } from '@gpu/common';
import { heldGpus } from '../../db/gpu-lease-repository.ts';
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

/** The GPUs a rental takes: what it prices, and their indices on the machine. */
export interface GpuChoice {
  resources: RentedResources;
  indices: number[];
}

/** The statuses in which a machine can take a rental (the leases decide how much of it is free). */
const RENTABLE = new Set(['idle', 'busy']);

/** Refuses a machine that cannot be rented now (offline, in maintenance, in error, or held off the market). */
export function assertRentable(machine: ProviderRecord): void {
  if (!RENTABLE.has(machine.status)) {
    throw billingErrors.providerNotAvailable(machine.id, `is ${machine.status}, not idle`, machine.status);
  }
  if (machine.held) {
    throw billingErrors.providerNotAvailable(machine.id, 'is held off the market by its owner', machine.status);
  }
}

/**
 * The GPUs of the machine a rental of `asked.gpuCount` GPUs of `asked.gpuModel` takes: the lowest-indexed healthy GPUs
 * of the model (by model key, so `H100` finds `NVIDIA H100 80GB HBM3`; else of the machine's model when it has only
 * one) that `held` does not name. A quote passes no holdings.
 */
export function chooseGpus(machine: ProviderRecord, asked: RentedResources, held: ReadonlySet<number>): GpuChoice {
  if (asked.gpuCount < machine.minGpusPerRental) {
    throw billingErrors.gpuGroupTooSmall(machine.id, asked.gpuCount, machine.minGpusPerRental);
  }
  const byModel = new Map<string, { index: number; gpu: ProviderGpu }[]>();
  machine.gpus.forEach((gpu, index) => {
    if (!gpu.healthy) return;
    const key = gpuModelKey(gpu.model);
    byModel.set(key, [...(byModel.get(key) ?? []), { index, gpu }]);
  });
  const group = byModel.get(gpuModelKey(asked.gpuModel)) ?? (byModel.size === 1 ? [...byModel.values()][0]! : []);
  const free = group.filter((g) => !held.has(g.index));
  if (free.length < asked.gpuCount) {
    throw billingErrors.providerNotAvailable(
      machine.id,
      `has ${free.length} free healthy GPU(s) of model ${asked.gpuModel}, ${asked.gpuCount} asked`,
      // Rented out (in part): busy to this renter, whatever the registry has heard yet.
      free.length < group.length ? 'busy' : machine.status,
    );
  }
  const taken = free.slice(0, asked.gpuCount);
  return { resources: resourcesOf(taken, asked.estimatedPowerW), indices: taken.map((g) => g.index) };
}

/** The GPUs of a reservation, priced as a start would (every one must still be on the machine and healthy). */
export function reservedGpus(machine: ProviderRecord, indices: number[], asked: RentedResources): GpuChoice {
  const taken = indices.map((index) => ({ index, gpu: machine.gpus[index] }));
  const lost = taken.filter((g) => !g.gpu?.healthy).map((g) => g.index);
  if (lost.length > 0) {
    throw billingErrors.providerNotAvailable(
      machine.id,
      `no longer has healthy GPU(s) ${lost.join(', ')}`,
      machine.status,
    );
  }
  const present = taken as { index: number; gpu: ProviderGpu }[];
  return { resources: resourcesOf(present, asked.estimatedPowerW), indices };
}

/** What the GPUs price: their model, count, VRAM and power (the renter's estimate when one does not report it). */
function resourcesOf(taken: { gpu: ProviderGpu }[], estimatedPowerW: number): RentedResources {
  const power = taken.every((g) => g.gpu.powerW !== null)
    ? taken.reduce((sum, g) => sum + (g.gpu.powerW ?? 0), 0)
    : estimatedPowerW;
  return {
    gpuModel: taken[0]!.gpu.model,
    gpuCount: taken.length,
    requestedVramMb: taken.reduce((sum, g) => sum + g.gpu.vramMb, 0),
    estimatedPowerW: power,
  };
}

/**
 * What a quote for this machine prices: with a registry, the GPUs a start would lease on it now (the free ones, read
 * without the lease lock; when too few are free, the machine's first GPUs of the model, as if none were rented), 404
 * PROVIDER_NOT_FOUND for a machine the registry does not know; without one, the figures asked.
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
  const held = new Set(await heldGpus(ctx.db, machine.id, ctx.now()));
  try {
    return chooseGpus(machine, asked, held).resources;
  } catch (err) {
    if (held.size === 0 || (err as { code?: string }).code !== 'PROVIDER_NOT_AVAILABLE') throw err;
    return chooseGpus(machine, asked, new Set()).resources;
  }
}
