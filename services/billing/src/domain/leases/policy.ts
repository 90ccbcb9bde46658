/**
 * The one rule of leasing: which of a machine's GPUs a request may take, given the GPUs held on it now (by running
 * sessions, and by reservations until they expire). A start, a reservation and a quote all ask it; a start and a
 * reservation under the machine's lease lock (lease.ts), so two holders never get one GPU.
 */
import { gpuModelKey } from '@gpu/common';
import type { HeldGpu } from '../../db/gpu-lease-repository.ts';
import { billingErrors } from '../../errors.ts';
import { Dec } from '../ledger/index.ts';
import type { ProviderRecord } from '../provider-directory.ts';
import { choiceOf, type GpuChoice, gpusOfModel, type IndexedGpu, onlyModel } from './machine.ts';

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
  /** Interruptible at this bid per GPU-hour; absent: on demand. */
  bid?: string;
  /** A start: it may take GPUs from interruptible sessions it outbids (a quote and a reservation take free ones). */
  mayPreempt?: boolean;
}

/** The GPUs a request takes, and the interruptible sessions it takes them from (each ends `preempted`). */
export interface LeaseChoice extends GpuChoice {
  preempt: string[];
}

/**
 * The GPUs the request may take:
 *
 * - naming a reservation, exactly its GPUs: 404 RESERVATION_NOT_FOUND when it holds none (used, expired, another
 *   machine's), 409 RESERVATION_MISMATCH when it is held for another renter or holds another count or model, 409
 *   PROVIDER_NOT_AVAILABLE when one of its GPUs is no longer healthy;
 * - otherwise at least the machine's `min_gpus_per_rental` (409 GPU_GROUP_TOO_SMALL) of the model's healthy GPUs: the
 *   free ones first, lowest index first, then those reserved for the renter; too few is 409 PROVIDER_NOT_AVAILABLE;
 * - a start that finds too few (`mayPreempt`) also takes the GPUs of interruptible sessions it outbids: an on-demand
 *   start outbids every bid, a bid only lower ones (never an equal one). Whole sessions, the lowest bids first (of
 *   equal bids the newest session, which loses the least work), only as many as the request still needs, and none
 *   the others taken cover without; the free GPUs go first, and what a taken session held beyond the need stays free.
 *   A bid never takes the renter's reserved GPUs (a reservation is on demand).
 */
export function leasableGpus(machine: ProviderRecord, request: LeaseRequest, held: readonly HeldGpu[]): LeaseChoice {
  if (request.reservationId) {
    return { ...reservedGpus(machine, request, request.reservationId.toLowerCase(), held), preempt: [] };
  }
  if (request.gpuCount < machine.minGpusPerRental) {
    throw billingErrors.gpuGroupTooSmall(machine.id, request.gpuCount, machine.minGpusPerRental);
  }
  const model = request.gpuModel ?? onlyModel(machine);
  const group = gpusOfModel(machine, model);
  const holders = new Map(held.map((h) => [h.gpu_index, h]));
  const renter = request.renterId?.toLowerCase();
  const free = group.filter((g) => !holders.has(g.index));
  // A reservation holds on-demand GPUs: a bid does not take them.
  const reservedForRenter = group.filter((g) => {
    const h = holders.get(g.index);
    return request.bid === undefined && renter !== undefined && h?.reservation_id != null && h.user_id === renter;
  });
  const takeable = [...free, ...reservedForRenter];
  let preempt: string[] = [];
  if (takeable.length < request.gpuCount && request.mayPreempt) {
    const taken = takenSessions(outbidSessions(group, holders, request.bid), request.gpuCount - takeable.length);
    preempt = taken.map((v) => v.sessionId);
    for (const v of taken) takeable.push(...v.gpus);
  }
  if (takeable.length < request.gpuCount) {
    throw billingErrors.providerNotAvailable(
      machine.id,
      `has ${takeable.length} free healthy GPU(s) of model ${model}${request.mayPreempt ? ' (with those held by lower bids)' : ''}, ${request.gpuCount} asked`,
      // Leased out (in part): busy to this renter, whatever the registry has heard yet.
      takeable.length < group.length ? 'busy' : machine.status,
    );
  }
  const choice = choiceOf(
    takeable.slice(0, request.gpuCount).sort((a, b) => a.index - b.index),
    request.estimatedPowerW,
  );
  return { ...choice, preempt };
}

/**
 * The sessions to take for `needed` GPUs, from `outbid` (in the order they are taken): the lowest bids first until
 * enough, then, from the highest bid taken down, any session the others cover without (never one taken for nothing).
 */
function takenSessions<T extends { gpus: unknown[] }>(outbid: T[], needed: number): T[] {
  const taken: T[] = [];
  let got = 0;
  for (const v of outbid) {
    if (got >= needed) break;
    taken.push(v);
    got += v.gpus.length;
  }
  for (let i = taken.length - 1; i >= 0; i--) {
    const v = taken[i]!;
    if (got - v.gpus.length >= needed) {
      taken.splice(i, 1);
      got -= v.gpus.length;
    }
  }
  return taken;
}

/**
 * The interruptible sessions holding GPUs of `group` that a request at `bid` (absent: on demand) outbids, in the
 * order they are taken: the lowest bid first, then the newest.
 */
function outbidSessions(
  group: readonly IndexedGpu[],
  holders: ReadonlyMap<number, HeldGpu>,
  bid: string | undefined,
): { sessionId: string; bid: Dec; startedAt: number; gpus: IndexedGpu[] }[] {
  const sessions = new Map<string, { sessionId: string; bid: Dec; startedAt: number; gpus: IndexedGpu[] }>();
  for (const g of group) {
    const h = holders.get(g.index);
    if (!h?.session_id || h.bid === null) continue;
    const theirs = new Dec(h.bid);
    if (bid !== undefined && !theirs.lt(bid)) continue;
    const entry = sessions.get(h.session_id) ?? {
      sessionId: h.session_id,
      bid: theirs,
      startedAt: h.started_at ? new Date(h.started_at).getTime() : 0,
      gpus: [],
    };
    entry.gpus.push(g);
    sessions.set(h.session_id, entry);
  }
  return [...sessions.values()].sort((a, b) => a.bid.comparedTo(b.bid) || b.startedAt - a.startedAt);
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
