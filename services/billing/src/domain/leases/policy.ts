/**
 * The one rule of leasing: which of a machine's GPUs a request may take, given the GPUs held on it now (by running
 * sessions, and by reservations until they expire). A start, a reservation and a quote all ask it; a start and a
 * reservation under the machine's lease lock (lease.ts), so two holders never get one GPU.
 */
import { gpuModelKey } from '@gpu/common';
import type { HeldGpu } from '../../db/gpu-lease-repository.ts';
import { billingErrors } from '../../errors.ts';
import type { ProviderRecord } from '../provider-directory.ts';
import { choiceOf, type GpuChoice, gpusOfModel, onlyModel } from './machine.ts';

/** What a request asks of a machine: how many GPUs of which model, for whom. */
export interface LeaseRequest {
  /** The renter the GPUs are for: GPUs reserved for them may be taken (absent: free GPUs only, as a reservation). */
  renterId?: string;
  /** The model, by model key; absent: the machine's only one. */
  gpuModel?: string;
  gpuCount: number;
  /** Power in watts priced for GPUs that report none. */
  estimatedPowerW: number;
  /** A reservation the request names: it takes exactly its GPUs. */
  reservationId?: string;
}

/**
 * The GPUs the request may take:
 *
 * - naming a reservation, exactly its GPUs: 404 RESERVATION_NOT_FOUND when it holds none (used, expired, another
 *   machine's), 409 RESERVATION_MISMATCH when it is held for another renter or holds another count or model, 409
 *   PROVIDER_NOT_AVAILABLE when one of its GPUs is no longer healthy;
 * - otherwise at least the machine's `min_gpus_per_rental` (409 GPU_GROUP_TOO_SMALL) of the model's healthy GPUs: the
 *   free ones first, lowest index first, then those reserved for the renter; too few is 409 PROVIDER_NOT_AVAILABLE.
 *
 * An interruptible lease will be one more branch: the GPUs it holds, for a request that outbids it.
 */
export function leasableGpus(machine: ProviderRecord, request: LeaseRequest, held: readonly HeldGpu[]): GpuChoice {
  if (request.reservationId) return reservedGpus(machine, request, request.reservationId.toLowerCase(), held);
  if (request.gpuCount < machine.minGpusPerRental) {
    throw billingErrors.gpuGroupTooSmall(machine.id, request.gpuCount, machine.minGpusPerRental);
  }
  const model = request.gpuModel ?? onlyModel(machine);
  const group = gpusOfModel(machine, model);
  const holders = new Map(held.map((h) => [h.gpu_index, h]));
  const renter = request.renterId?.toLowerCase();
  const free = group.filter((g) => !holders.has(g.index));
  const reservedForRenter = group.filter((g) => {
    const h = holders.get(g.index);
    return renter !== undefined && h?.reservation_id != null && h.user_id === renter;
  });
  const takeable = [...free, ...reservedForRenter];
  if (takeable.length < request.gpuCount) {
    throw billingErrors.providerNotAvailable(
      machine.id,
      `has ${takeable.length} free healthy GPU(s) of model ${model}, ${request.gpuCount} asked`,
      // Leased out (in part): busy to this renter, whatever the registry has heard yet.
      takeable.length < group.length ? 'busy' : machine.status,
    );
  }
  return choiceOf(
    takeable.slice(0, request.gpuCount).sort((a, b) => a.index - b.index),
    request.estimatedPowerW,
  );
}

/** Exactly the GPUs of the named reservation, for its renter, as many and of the model asked. */
function reservedGpus(
  machine: ProviderRecord,
  request: LeaseRequest,
  reservationId: string,
  held: readonly HeldGpu[],
): GpuChoice {
  const reserved = held.filter((h) => h.reservation_id === reservationId);
  if (reserved.length === 0) throw billingErrors.reservationNotFound(reservationId);
  if (reserved[0]!.user_id !== request.renterId?.toLowerCase()) {
    throw billingErrors.reservationMismatch(reservationId, 'is held for another renter');
  }
  const lost = reserved.filter((h) => !machine.gpus[h.gpu_index]?.healthy).map((h) => h.gpu_index);
  if (lost.length > 0) {
    throw billingErrors.providerNotAvailable(
      machine.id,
      `no longer has healthy GPU(s) ${lost.join(', ')}`,
      machine.status,
    );
  }
  const choice = choiceOf(
    reserved.map((h) => ({ index: h.gpu_index, gpu: machine.gpus[h.gpu_index]! })),
    request.estimatedPowerW,
  );
  const model = request.gpuModel ?? choice.resources.gpuModel;
  if (choice.indices.length !== request.gpuCount || gpuModelKey(choice.resources.gpuModel) !== gpuModelKey(model)) {
    throw billingErrors.reservationMismatch(
      reservationId,
      `holds ${choice.indices.length} GPU(s) of model ${choice.resources.gpuModel}, not ${request.gpuCount} of ${model}`,
    );
  }
  return choice;
}
