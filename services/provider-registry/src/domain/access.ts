/**
 * Who may do what in the registry (the README's access table), as rules the
 * registry service applies to every operation, whichever way it is reached.
 *
 * - Providers (users with the `provider` role) and their daemons (clients acting for them) register machines
 *   owned by themselves, and update, heartbeat, change the status of and delete only those.
 * - Admins and platform services (`service` clients) do all of it for any owner, and may move a machine to
 *   another owner.
 * - Discovery: the scheduler, the API gateway, admins and services read every provider; a provider or daemon
 *   lists and reads only its own machines. Renters do not read providers (owner, host name, address): they read a
 *   machine's reliability, which anyone with a token may.
 * - Someone else's machine answers 403 NOT_PROVIDER_OWNER: provider IDs are random UUIDs known to the
 *   scheduler and renters anyway, so a 404 would hide nothing.
 */
import { errors, hasRole, isPrivileged, mayActFor, type Principal, type Role } from '@gpu/common';

/** Roles that may register and manage machines (their own, or any for admins and services). */
export const MANAGING_ROLES: readonly Role[] = ['provider', 'daemon', 'admin', 'service'];

/** Roles that may read providers (discovery and single reads). */
export const READING_ROLES: readonly Role[] = [...MANAGING_ROLES, 'scheduler', 'gateway'];

/**
 * Roles that may read a machine's reliability: everyone with a token, renters included. It tells nothing of the
 * owner or the machine's address, and renters choose machines by it.
 */
export const RELIABILITY_ROLES: readonly Role[] = [...READING_ROLES, 'renter'];

const notOwner = () => errors.forbidden('providers may only manage their own machines', 'NOT_PROVIDER_OWNER');

/** Whether the actor reads every provider (discovery), rather than only its own. */
const readsAll = (actor: Principal) => isPrivileged(actor) || hasRole(actor, 'scheduler', 'gateway');

/** The owner discovery is limited to for this actor, or undefined for all providers. */
export function discoveryScope(actor: Principal): string | undefined {
  return readsAll(actor) ? undefined : actor.actsFor;
}

export function assertMayRead(actor: Principal, ownerId: string): void {
  if (!readsAll(actor) && !mayActFor(actor, ownerId)) throw notOwner();
}

export function assertMayManage(actor: Principal, ownerId: string): void {
  if (!mayActFor(actor, ownerId)) throw notOwner();
}

/** A new machine's owner must be the actor itself (or the user its daemon acts for), unless it is privileged. */
export function assertMayRegisterFor(actor: Principal, ownerId: string): void {
  assertMayManage(actor, ownerId);
}

/** Only admins and services move a machine to another owner. */
export function assertMayChangeOwner(actor: Principal, from: string, to: string): void {
  if (from !== to && !isPrivileged(actor)) throw notOwner();
}

/**
 * The owner a status write (heartbeat, explicit status) is limited to, or undefined for any: the write itself
 * checks ownership, so the check costs no extra round trip.
 */
export function writeScope(actor: Principal): string | undefined {
  if (isPrivileged(actor)) return undefined;
  if (actor.actsFor === undefined) throw notOwner();
  return actor.actsFor;
}

/** Roles that report rental sessions (billing, through its `service` client; admins by hand). */
export const SESSION_REPORTING_ROLES: readonly Role[] = ['admin', 'service'];

/** Only admins and platform services report which sessions run on a provider. */
export function assertMayTrackSessions(actor: Principal): void {
  if (!isPrivileged(actor)) throw errors.forbidden('only platform services report rental sessions', 'ROLE_REQUIRED');
}
