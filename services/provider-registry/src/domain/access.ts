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
 * - Bound daemons: a machine is bound to the daemon client that registered it (or claimed it since, or that its owner
 *   bound it to: `PUT /providers/{id}/daemon`). A daemon writes (heartbeats, status, full update, deletion, binding)
 *   only the machines of its owner bound to itself or to none, so one of an owner's daemons cannot beat, park or
 *   delete a machine another of them runs; 403 NOT_MACHINE_DAEMON otherwise. It claims a machine bound to none; only
 *   the owner (a user's token), admins and services bind a machine to another client, or to none. Reading is not
 *   limited: a daemon reads its owner's machines (to find its own by name).
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

const notMachineDaemon = (id: string) =>
  errors.forbidden(
    `provider ${id} is bound to another daemon client: its owner binds it to this one (PUT /providers/${id}/daemon)`,
    'NOT_MACHINE_DAEMON',
  );

/** A machine's owner and the daemon client it is bound to (null: none). */
export interface MachineBinding {
  owner_id: string;
  daemon_client_id: string | null;
}

/** The daemon client an actor writes as (its token's `client_id`), or undefined for every other kind of caller. */
function daemonClientOf(actor: Principal): string | undefined {
  if (actor.kind !== 'client' || isPrivileged(actor) || !hasRole(actor, 'daemon')) return undefined;
  return actor.clientId;
}

/** The daemon client a machine registered by the actor is bound to: the registering daemon's, else none. */
export const registeringDaemon = (actor: Principal): string | null => daemonClientOf(actor) ?? null;

/** Whether the actor reads every provider (discovery), rather than only its own. */
const readsAll = (actor: Principal) => isPrivileged(actor) || hasRole(actor, 'scheduler', 'gateway');

/**
 * The owner discovery is limited to for this actor, or undefined for all providers; an actor that reads not all and
 * acts for nobody is refused (never shown all, whatever token made it so).
 */
export function discoveryScope(actor: Principal): string | undefined {
  if (readsAll(actor)) return undefined;
  if (actor.actsFor === undefined) throw notOwner();
  return actor.actsFor;
}

export function assertMayRead(actor: Principal, ownerId: string): void {
  if (!readsAll(actor) && !mayActFor(actor, ownerId)) throw notOwner();
}

function assertMayManage(actor: Principal, ownerId: string): void {
  if (!mayActFor(actor, ownerId)) throw notOwner();
}

/** The owner's rule, then the bound daemon's: a daemon writes only a machine bound to itself or to none. */
export function assertMayWrite(actor: Principal, id: string, machine: MachineBinding): void {
  assertMayManage(actor, machine.owner_id);
  const daemon = daemonClientOf(actor);
  if (daemon !== undefined && machine.daemon_client_id !== null && machine.daemon_client_id !== daemon) {
    throw notMachineDaemon(id);
  }
}

/**
 * Binding the machine to the daemon client `clientId` (null: none). Its owner (a user's own token), admins and
 * services bind it to any client or to none; a daemon only claims it for itself, while it is bound to none (or to
 * itself already).
 */
export function assertMayBind(actor: Principal, id: string, machine: MachineBinding, clientId: string | null): void {
  assertMayWrite(actor, id, machine);
  const daemon = daemonClientOf(actor);
  if (daemon !== undefined && clientId !== daemon) {
    throw errors.forbidden(
      'a daemon binds a machine to itself only; its owner binds it to another client',
      'NOT_MACHINE_DAEMON',
    );
  }
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
 * What a write is limited to: the machines of `owner`, and for a daemon (`daemon`: its client ID) those of them bound
 * to it or to none.
 */
export interface WriteScope {
  readonly owner: string;
  readonly daemon?: string;
}

/**
 * What a status write (heartbeat, explicit status, deletion) is limited to, or undefined for any machine: the write
 * itself checks ownership and the binding, so the check costs no extra round trip.
 */
export function writeScope(actor: Principal): WriteScope | undefined {
  if (isPrivileged(actor)) return undefined;
  if (actor.actsFor === undefined) throw notOwner();
  const daemon = daemonClientOf(actor);
  return daemon === undefined ? { owner: actor.actsFor } : { owner: actor.actsFor, daemon };
}

/** Roles that report rental sessions (billing, through its `service` client; admins by hand). */
export const SESSION_REPORTING_ROLES: readonly Role[] = ['admin', 'service'];

/** Only admins and platform services report which sessions run on a provider. */
export function assertMayTrackSessions(actor: Principal): void {
  if (!isPrivileged(actor)) throw errors.forbidden('only platform services report rental sessions', 'ROLE_REQUIRED');
}
