/**
 * Billing is the one owner of which GPUs are free: its leases (`gpu_leases`) decide, and the provider registry's
 * market only shows what billing states. After every change of a machine's leases (a start, an end, a reservation
 * made, used, cancelled or lapsed) billing states the GPUs held on the machine in the change's own transaction
 * (`lease.held`, with the bids of the GPUs interruptible sessions hold, for the market's interruptible prices;
 * through the outbox: over NATS, or the registry's `PUT /providers/{id}/gpus-held`), numbered by a
 * version that grows with each statement of the machine. The registry keeps the newest and drops older or repeated
 * ones, so redeliveries and reordering are harmless and its offers agree with billing's leases once the last
 * statement is applied.
 *
 * The version's row lock is the last lock a change takes: statements of one machine are numbered in the order they
 * commit, and each is read after the previous one committed. A transaction that ends several sessions notes their
 * machines (`noteLeaseChange`) and states them at its end in machine order (`stateNotedLeases`), so two such
 * transactions never wait on each other's machines.
 *
 * A reservation lapses at its `expires_at` (billing's leases stop counting it then); the expiry sweep
 * (`expireReservations`, woken at the next expiry) drops it and states the machine again at once.
 */
import type { Transaction } from 'kysely';
import {
  heldBids,
  heldIndices,
  lockMachineGpus,
  machinesWithLapsedReservations,
  nextLeaseVersion,
  nextReservationExpiry,
} from '../../db/gpu-lease-repository.ts';
import type { BillingDB } from '../../db/schema.ts';
import type { BillingContext } from '../context.ts';

type Trx = Transaction<BillingDB>;

/** Machines lapsed reservations are dropped from per sweep, at most. */
const EXPIRY_BATCH = 1_000;

/** States the GPUs held on the machine now, with its next version (last in the transaction of the change). */
export async function stateHeldGpus(
  ctx: BillingContext,
  trx: Trx,
  providerId: string,
  correlationId?: string,
): Promise<void> {
  const version = await nextLeaseVersion(trx, providerId);
  const gpuIndices = await heldIndices(trx, providerId, ctx.now());
  const bids = await heldBids(trx, providerId);
  await ctx.events.record(trx, { kind: 'lease.held', providerId, version, gpuIndices, bids }, correlationId);
}

/** The machines whose leases a transaction changed, to state at its end. */
const noted = new WeakMap<Trx, Set<string>>();

/** Notes that the transaction changed the machine's leases (an end): `stateNotedLeases` states it. */
export function noteLeaseChange(trx: Trx, providerId: string): void {
  const machines = noted.get(trx) ?? new Set<string>();
  machines.add(providerId);
  noted.set(trx, machines);
}

/** States every machine the transaction noted, in machine order; last in the transaction. */
export async function stateNotedLeases(ctx: BillingContext, trx: Trx, correlationId?: string): Promise<void> {
  const machines = noted.get(trx);
  if (!machines) return;
  noted.delete(trx);
  for (const providerId of [...machines].sort()) await stateHeldGpus(ctx, trx, providerId, correlationId);
}

/**
 * Drops the reservations lapsed by now and states their machines, a machine per transaction under its lease lock;
 * when the next reservation lapses (null: none will).
 */
export async function expireReservations(ctx: BillingContext): Promise<Date | null> {
  const machines = await machinesWithLapsedReservations(ctx.db, ctx.now(), EXPIRY_BATCH);
  for (const providerId of machines) {
    await ctx.db.transaction().execute(async (trx) => {
      const { dropped } = await lockMachineGpus(trx, providerId, ctx.now);
      // Another instance's sweep, or a start, dropped them first and stated the machine.
      if (dropped > 0) await stateHeldGpus(ctx, trx, providerId);
    });
  }
  return nextReservationExpiry(ctx.db, ctx.now());
}
