/** Leases of machines' GPUs: which GPUs a request may take, taking them for a session or a reservation, quotes. */
export { expireReservations, noteLeaseChange, stateNotedLeases } from './held.ts';
export { couldLease, leaseToSession, lockLeases, quotedResources, takeGpus } from './lease.ts';
export { assertRentable, type RentedResources } from './machine.ts';
export type { LeaseRequest } from './policy.ts';
export {
  cancelReservation,
  DEFAULT_RESERVATION_MS,
  MAX_RESERVATION_MS,
  type Reservation,
  reserveGpus,
} from './reservations.ts';
