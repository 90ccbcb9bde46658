/**
 * Who may do what in billing (the README's access table), as rules the domain applies whichever way an operation
 * is reached (HTTP, NATS, a background job).
 *
 * - A wallet is held by one user: the owner of a user wallet, or the owner of a provider wallet's machine (from
 *   the provider registry when the wallet is made). Its balance, history, deposits, withdrawals and payouts are for
 *   that user's own token (never a daemon's: a machine credential on a GPU host moves no money), admins and
 *   platform services (`isPrivileged`).
 * - A renter starts sessions on their own user wallet only. A session's renter and the provider machine's owner
 *   (or the daemon acting for that owner) read and end it; usage is reported only by that owner's daemon (or the
 *   owner, an admin or a service).
 * - Billing history shows a user the sessions they rented or provided; admins and services see all.
 * - Someone else's wallet or session answers 403 (their IDs are random UUIDs: a 404 would hide nothing).
 */
import { errors, isPrivileged, mayActFor, type Principal } from '@gpu/common';
import { billingErrors } from '../errors.ts';

const notHolder = (walletId: string) =>
  errors.forbidden(`wallet ${walletId} belongs to someone else`, 'NOT_WALLET_HOLDER');

/** Whether the actor is the user `userId` itself, with a user's token (not a daemon acting for them). */
const isUser = (actor: Principal, userId: string | null) =>
  actor.kind === 'user' && userId !== null && actor.subject === userId;

/** The wallet's holder (or an admin or service) may read it and move its money. */
export function assertWalletHolder(actor: Principal, wallet: { id: string; holderId: string | null }): void {
  if (!isPrivileged(actor) && !isUser(actor, wallet.holderId)) throw notHolder(wallet.id);
}

/**
 * That the actor may send a wallet's money to `destination`: the wallet's own address, or another that its holder
 * (their own token or API key) names, or anyone while access control is off; else 403 DESTINATION_NOT_ALLOWED. An
 * admin or a platform service acting on someone else's wallet pays only the wallet's own address (which its holder
 * chose), so a leaked or misused privileged token cannot send anyone's money elsewhere.
 */
export function assertMayPayTo(
  actor: Principal,
  wallet: { holderId: string | null; solanaAddress: string | null },
  destination: string,
): void {
  if (destination === wallet.solanaAddress || actor.unchecked === true || isUser(actor, wallet.holderId)) return;
  throw billingErrors.destinationNotAllowed(destination);
}

/** A new wallet for the user `ownerId` is made by that user (or an admin or service). */
export function assertMayCreateUserWallet(actor: Principal, ownerId: string): void {
  if (!isPrivileged(actor) && !isUser(actor, ownerId)) {
    throw errors.forbidden('a user wallet is made by its owner', 'NOT_WALLET_HOLDER');
  }
}

/** Only admins and services name a wallet's holder themselves (everyone else's is looked up). */
export function assertMayNameHolder(actor: Principal): void {
  if (!isPrivileged(actor)) {
    throw errors.forbidden("only admins and services name a wallet's holder", 'NOT_WALLET_HOLDER');
  }
}

/**
 * How an actor uses a provider machine's account: `read` its earnings and payout setting (the owner's daemon too), or
 * `manage` it (payouts, payout setting, rates: the owner's own token only).
 */
export type ProviderAccess = 'read' | 'manage';

/** Whether the actor may use, as `access` says, the account of a provider machine owned by `ownerId`. */
export function mayUseProviderAccount(actor: Principal, ownerId: string | null, access: ProviderAccess): boolean {
  if (isPrivileged(actor)) return true;
  if (ownerId === null) return false;
  return access === 'read' ? mayActFor(actor, ownerId) : isUser(actor, ownerId);
}

/** 403 NOT_PROVIDER_OWNER: names only the machine (never its wallet), whatever the caller does not hold. */
export const notProviderOwner = (providerId: string) =>
  errors.forbidden(`provider ${providerId} belongs to someone else`, 'NOT_PROVIDER_OWNER');

/** A provider account (its wallet, its rates) is managed by the machine's owner (or an admin or service). */
export function assertProviderOwner(actor: Principal, providerId: string, ownerId: string | null): void {
  if (!mayUseProviderAccount(actor, ownerId, 'manage')) throw notProviderOwner(providerId);
}

/** The parties of a session: its renter and the provider machine's owner (and the daemon its machine is bound to). */
export interface SessionParties {
  id: string;
  user_id: string;
  provider_owner_id: string | null;
  /** The daemon client the machine was bound to (the registry's, copied at start and moved by re-binding). */
  provider_client_id: string | null;
}

const notParty = (sessionId: string) => errors.forbidden(`session ${sessionId} is someone else's`, 'NOT_SESSION_PARTY');

/** Whether the actor is the session's renter (a user's own token: a daemon never acts on its owner's rentals). */
const isRenter = (actor: Principal, session: SessionParties) => isUser(actor, session.user_id);

/** The renter, the provider's owner or its daemon (or an admin or service) read and end a session. */
export function assertSessionParty(actor: Principal, session: SessionParties): void {
  if (isPrivileged(actor) || isRenter(actor, session)) return;
  if (session.provider_owner_id !== null && mayActFor(actor, session.provider_owner_id)) return;
  throw notParty(session.id);
}

/** Only the renter (or an admin or service) changes what the renter pays: a session's bid. */
export function assertSessionRenter(actor: Principal, session: SessionParties): void {
  if (isPrivileged(actor) || isRenter(actor, session)) return;
  if (session.provider_owner_id !== null && mayActFor(actor, session.provider_owner_id)) {
    throw errors.forbidden(`only the renter of session ${session.id} changes its bid`, 'NOT_SESSION_RENTER');
  }
  throw notParty(session.id);
}

/**
 * Whether the actor ends the session as its provider side (the machine's owner or its daemon, not the renter, not an
 * admin or service): the machine was taken back from its renter, which counts against the machine's reliability.
 */
export const endsAsProvider = (actor: Principal, session: SessionParties) =>
  !isPrivileged(actor) && !isRenter(actor, session);

/** Whether the actor may see the renter's wallet figures of a session (its renter, admins and services). */
export const seesRenterWallet = (actor: Principal, session: SessionParties) =>
  isPrivileged(actor) || isRenter(actor, session);

/**
 * Whether the actor may report usage and workload states of the session, and take its file grants: the daemon its
 * machine is bound to (or the owner, an admin, a service). Another daemon client of the same owner is refused; a
 * session whose machine was bound to no daemon (`provider_client_id` null: registered by its owner's own token, billing
 * without a registry, a session from before bindings) takes any daemon of its owner, as the registry does.
 */
export function mayReportUsage(actor: Principal, session: SessionParties): boolean {
  if (isPrivileged(actor)) return true;
  if (session.provider_owner_id === null || actor.actsFor !== session.provider_owner_id) return false;
  const bound = session.provider_client_id;
  return actor.kind === 'user' || bound === null || actor.clientId === bound;
}

export const notSessionProvider = (sessionId: string) =>
  errors.forbidden(
    `only the daemon of session ${sessionId}'s machine (the client it is bound to) reports its usage`,
    'NOT_SESSION_PROVIDER',
  );

/** Whose records a list shows: a user's as renter or provider owner; a daemon's owner's as provider only. */
export interface ListScope {
  userId: string;
  /** `provider`: only records on the user's machines (a daemon never sees its owner's rentals). */
  side: 'any' | 'provider';
}

/** The records a history or session list is limited to (undefined: every record, for admins and services). */
export function historyScope(actor: Principal): ListScope | undefined {
  if (isPrivileged(actor)) return undefined;
  if (actor.actsFor === undefined) throw errors.forbidden('billing history is kept per user', 'NOT_SESSION_PARTY');
  return { userId: actor.actsFor, side: actor.kind === 'user' ? 'any' : 'provider' };
}
