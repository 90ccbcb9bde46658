/**
 * What a machine can give a lease, from the provider registry's record of it (when billing has a registry): its GPUs,
 * each addressed by its index in the record's `gpus` list, grouped by model key. The machine must be up (`idle`, or
 * `busy` as the registry may still show a machine whose session just ended: billing's own leases decide what is free)
 * and not held off the market by its owner (`held`).
 * A lease is priced from the record (the GPUs' model as the driver prints it, their VRAM and power), never from what
 * the renter declares.
 */
import { gpuModelKey } from '@gpu/common';
import { billingErrors } from '../../errors.ts';
import type { ProviderGpu, ProviderRecord } from '../provider-directory.ts';

/** The resources a session prices. */
export interface RentedResources {
  gpuModel: string;
  gpuCount: number;
  requestedVramMb: number;
  estimatedPowerW: number;
}

/** The GPUs a lease takes: what they price, and their indices on the machine. */
export interface GpuChoice {
  resources: RentedResources;
  indices: number[];
}

/** One of the machine's GPUs at its index. */
export interface IndexedGpu {
  index: number;
  gpu: ProviderGpu;
}

/** The statuses in which a machine can take a lease (the leases decide how much of it is free). */
const RENTABLE = new Set(['idle', 'busy']);

/** Refuses a machine that cannot be leased now (offline, in maintenance, in error, or held off the market). */
export function assertRentable(machine: ProviderRecord): void {
  if (!RENTABLE.has(machine.status)) {
    throw billingErrors.providerNotAvailable(machine.id, `is ${machine.status}, not idle`, machine.status);
  }
  if (machine.held) {
    throw billingErrors.providerNotAvailable(machine.id, 'is held off the market by its owner', machine.status);
  }
}

/**
 * The GPU model a request that names none asks for: the model of the machine's healthy GPUs when they are all of one
 * (400 GPU_MODEL_REQUIRED naming the models when there are several; without a registry's record, always).
 */
export function onlyModel(machine: ProviderRecord | null): string {
  const models = new Map<string, string>();
  for (const gpu of machine?.gpus ?? []) if (gpu.healthy) models.set(gpuModelKey(gpu.model), gpu.model);
  if (machine && models.size === 1) return [...models.values()][0]!;
  if (machine && models.size === 0) {
    throw billingErrors.providerNotAvailable(machine.id, 'has no healthy GPU', machine.status);
  }
  throw billingErrors.gpuModelRequired([...models.values()]);
}

/**
 * The machine's healthy GPUs of a model, in index order: by model key, so `H100` finds `NVIDIA H100 80GB HBM3`. A model
 * the machine has no GPU of is 409 GPU_MODEL_NOT_ON_MACHINE naming the models it has (never its other model instead: a
 * renter who asked for an A100 is not given, nor billed for, an H100).
 */
export function gpusOfModel(machine: ProviderRecord, model: string): IndexedGpu[] {
  const byModel = new Map<string, IndexedGpu[]>();
  const names = new Map<string, string>();
  machine.gpus.forEach((gpu, index) => {
    const key = gpuModelKey(gpu.model);
    names.set(key, gpu.model);
    if (gpu.healthy) byModel.set(key, [...(byModel.get(key) ?? []), { index, gpu }]);
  });
  const key = gpuModelKey(model);
  // A model it has, none of them healthy now: no GPU free (PROVIDER_NOT_AVAILABLE, the caller's).
  if (!names.has(key)) throw billingErrors.gpuModelNotOnMachine(machine.id, model, [...names.values()]);
  return byModel.get(key) ?? [];
}

/** What the GPUs price: their model, count, VRAM and power (the renter's estimate when one does not report it). */
export function choiceOf(taken: IndexedGpu[], estimatedPowerW: number): GpuChoice {
  const power = taken.every((g) => g.gpu.powerW !== null)
    ? taken.reduce((sum, g) => sum + (g.gpu.powerW ?? 0), 0)
    : estimatedPowerW;
  return {
    resources: {
      gpuModel: taken[0]!.gpu.model,
      gpuCount: taken.length,
      requestedVramMb: taken.reduce((sum, g) => sum + g.gpu.vramMb, 0),
      estimatedPowerW: power,
    },
    indices: taken.map((g) => g.index),
  };
}
