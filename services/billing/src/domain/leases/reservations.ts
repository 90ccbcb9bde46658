/**
 * Reservations, a kind of lease for the scheduler: a platform service (or an admin) holds N GPUs of a machine for one
 * renter for a short time (60 s by default, at most 5 minutes) while it places the job; the renter's start that names
 * the reservation leases exactly those GPUs, a start that does not may take them after the free ones (policy.ts), and
 * a reservation not used by then expires by itself (the expiry sweep drops it at its expiry: held.ts) or is
 * cancelled. The GPUs are chosen by the same rule as a start's, under the same lock (lease.ts), so a reservation and a
 * session never hold one GPU. Reserving costs nothing; the start checks the renter's funds and price as always.
 *
 * The registry hears of each (billing states the machine's held GPUs: held.ts, also when it lapses), so that offers
 * and `free_gpus` count its GPUs as taken while it lasts.
 */
import { randomUUID } from 'node:crypto';
import { errors, hasRole, isPrivileged, type Principal } from '@gpu/common';
import { findReservation, insertLeases, lockMachineGpus, releaseReservation } from '../../db/gpu-lease-repository.ts';
import { billingErrors } from '../../errors.ts';
import type { BillingContext } from '../context.ts';
import { stateHeldGpus } from './held.ts';
import { takeGpus } from './lease.ts';
import { assertRentable } from './machine.ts';

/** How long a reservation holds its GPUs unless the request says otherwise. */
export const DEFAULT_RESERVATION_MS = 60_000;
/** The longest a reservation may hold GPUs. */
export const MAX_RESERVATION_MS = 300_000;

export interface ReservationInput {
  actor: Principal;
  /** The renter the GPUs are held for: only their start may use them. */
  userId: string;
  providerId: string;
  gpuModel: string;
  gpuCount: number;
  ttlMs: number;
  correlationId?: string;
}

export interface Reservation {
  id: string;
  userId: string;
  providerId: string;
  gpuModel: string;
  gpuIndices: number[];
  expiresAt: Date;
}

const mayNotReserve = () => errors.forbidden('only platform services reserve GPUs for a renter', 'ROLE_REQUIRED');

/** The scheduler's own client (least privilege: reserving, nothing else of a service's) and the privileged. */
const mayReserve = (actor: Principal) => isPrivileged(actor) || hasRole(actor, 'scheduler');

/** Holds the GPUs for the renter until `ttlMs` from now; 409 as a start when the machine cannot give them. */
export async function reserveGpus(ctx: BillingContext, input: ReservationInput): Promise<Reservation> {
  if (!mayReserve(input.actor)) throw mayNotReserve();
  if (!ctx.providers) {
    throw billingErrors.providerNotAvailable(
      input.providerId,
      'cannot be reserved: billing has no registry',
      'unknown',
    );
  }
  const machine = await ctx.providers.provider(input.providerId, input.correlationId);
  if (!machine) throw billingErrors.providerNotFound(input.providerId);
  assertRentable(machine);
  const id = randomUUID();
  const made = await ctx.db.transaction().execute(async (trx) => {
    // Free GPUs only: a reservation never takes over another one, even one held for the same renter.
    const { at, ...choice } = await takeGpus(
      trx,
      machine,
      { ...input, renterId: undefined, estimatedPowerW: 0 },
      ctx.now,
    );
    const expiresAt = new Date(at.getTime() + input.ttlMs);
    await insertLeases(trx, machine.id, choice.indices, { reservationId: id, userId: input.userId, expiresAt });
    await stateHeldGpus(ctx, trx, machine.id, input.correlationId);
    return {
      id,
      userId: input.userId,
      providerId: machine.id,
      gpuModel: choice.resources.gpuModel,
      gpuIndices: choice.indices,
      expiresAt,
    };
  });
  // Its GPUs are stated free the moment it lapses.
  ctx.state.wakeReservations();
  return made;
}

/** Frees a reservation's GPUs before it expires; RESERVATION_NOT_FOUND when it holds none (used, expired, unknown). */
export async function cancelReservation(
  ctx: BillingContext,
  actor: Principal,
  reservationId: string,
  correlationId?: string,
): Promise<void> {
  if (!mayReserve(actor)) throw mayNotReserve();
  const id = reservationId.toLowerCase();
  await ctx.db.transaction().execute(async (trx) => {
    const found = await findReservation(trx, id);
    if (found) await lockMachineGpus(trx, found.provider_id, ctx.now);
    const freed = found ? await releaseReservation(trx, id) : [];
    if (!found || freed.length === 0) throw billingErrors.reservationNotFound(id);
    await stateHeldGpus(ctx, trx, found.provider_id, correlationId);
  });
}
