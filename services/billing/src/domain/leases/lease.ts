/**
 * Leases of a machine's GPUs (`gpu_leases`, migration XIII: one row per GPU held, keyed by machine and index): held by
 * a running session, or by a reservation until it expires. Every writer that takes a machine's GPUs (a start, a
 * reservation) takes them here, under the machine's lease lock, by the one rule (policy.ts); the table's key is the
 * backstop. A session's end frees its rows in the transaction that ends it.
 */
import type { Transaction } from 'kysely';
import { heldGpus, insertLeases, lockMachineGpus, releaseReservedGpus } from '../../db/gpu-lease-repository.ts';
import type { BillingDB } from '../../db/schema.ts';
import { billingErrors } from '../../errors.ts';
import type { BillingContext } from '../context.ts';
import type { ProviderRecord } from '../provider-directory.ts';
import { stateHeldGpus } from './held.ts';
import type { RentedResources } from './machine.ts';
import { type LeaseChoice, type LeaseRequest, leasableGpus } from './policy.ts';

/**
 * The GPUs the request may take on the machine (with the interruptible sessions it takes them from, which the caller
 * ends first), under its lease lock until the transaction ends, and the time of taking them (`at`: read under the lock after the holders, so a lease never starts before the end of a holder it saw
 * gone).
 */
export async function takeGpus(
  trx: Transaction<BillingDB>,
  machine: ProviderRecord,
  request: LeaseRequest,
  clock: () => Date,
): Promise<LeaseChoice & { at: Date }> {
  const { at, held } = await lockMachineGpus(trx, machine.id, clock);
  return { ...leasableGpus(machine, request, held), at };
}

/**
 * Takes the machine's lease lock until the transaction ends, for a change that moves what its leases mean to the market
 * without taking GPUs (a bid changed): every start chooses under that lock.
 */
export async function lockLeases(trx: Transaction<BillingDB>, providerId: string, clock: () => Date): Promise<void> {
  await lockMachineGpus(trx, providerId, clock);
}

/** Refuses, before any lock, a request the machine could never give (too small a group, too few GPUs, no model). */
export function couldLease(machine: ProviderRecord, request: LeaseRequest): void {
  if (!request.reservationId) leasableGpus(machine, request, []);
}

/**
 * Leases the GPUs taken (`takeGpus`, same transaction) to the session (reserved ones are handed over), then states
 * the machine's held GPUs (held.ts): last in the start's transaction.
 */
export async function leaseToSession(
  ctx: BillingContext,
  trx: Transaction<BillingDB>,
  lease: { providerId: string; sessionId: string; indices: number[] },
  correlationId?: string,
): Promise<void> {
  await releaseReservedGpus(trx, lease.providerId, lease.indices);
  await insertLeases(trx, lease.providerId, lease.indices, { sessionId: lease.sessionId });
  await stateHeldGpus(ctx, trx, lease.providerId, correlationId);
}

/**
 * What a quote for this machine prices: with a registry, the GPUs a start would lease on it now (read without the
 * lock; when too few are free, the machine's first GPUs of the model, as if none were leased), 404
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
  const held = await heldGpus(ctx.db, machine.id, ctx.now());
  try {
    return leasableGpus(machine, asked, held).resources;
  } catch (err) {
    if (held.length === 0 || (err as { code?: string }).code !== 'PROVIDER_NOT_AVAILABLE') throw err;
    return leasableGpus(machine, asked, []).resources;
  }
}
