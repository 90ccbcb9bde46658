/**
 * An address belongs to whoever reads its mail: against account pre-hijacking (someone registers another person's
 * address, signs in, makes keys and daemons, and waits for the owner to use the account).
 *
 * - An account runs in an **epoch**. Every credential records the epoch it was made in: each sign-in (its refresh
 *   tokens' family), trusted device, API key and daemon client (its owner's). Proving the address by mail without the
 *   account's own sign-in, that is a password reset or a verification that sets a new password, **starts the next
 *   epoch** (`startAfresh`): the password is the mail reader's, the address verified, and everything made before dies:
 *   every sign-in, trusted device, API key, daemon client and mailed code, and the account's SSH keys are removed. A
 *   credential of an earlier epoch is refused wherever this service looks at it (login, refresh, the key and client
 *   grants, its own routes), so one minted by a request that raced the change dies too.
 * - A verification made with the account's own live sign-in (the mail reader knows the password) keeps everything.
 * - This service refuses, at once, a token whose credential it can see withdrawn (`withLiveCredentials`,
 *   liveness.ts): a user's token whose sign-in ended (signed out, the password changed elsewhere, the account started
 *   afresh) is 401 `SIGN_IN_ENDED`, an API key's token whose key was revoked is 401 `API_KEY_REVOKED`. The other
 *   services verify tokens by their signature alone: there such a token lives out its lifetime (15 minutes, a key's
 *   2), unless the service asks this one with the same rule (`credentialsLive`), as billing does for its streams.
 */
import type { Principal } from '@gpu/common';
import type { Kysely } from 'kysely';
import { revokeUserApiKeys } from '../../db/api-key-repository.ts';
import { revokeOwnedClients } from '../../db/client-repository.ts';
import { retireEmailTokens } from '../../db/email-token-repository.ts';
import { revokeUserFamilies, signInEpoch } from '../../db/refresh-token-repository.ts';
import type { AuthDatabase } from '../../db/schema.ts';
import { deleteUserSshKeys } from '../../db/ssh-key-repository.ts';
import { forgetUserDevices } from '../../db/trusted-device-repository.ts';
import { findUserById, startNextEpoch, type UserRow } from '../../db/user-repository.ts';
import { authErrors } from '../../errors.ts';
import type { AuthContext } from '../context.ts';

/** What a fresh start ended, for the audit trail. */
export interface FreshStart {
  user: UserRow;
  keysRevoked: number;
  clientsRevoked: number;
  sshKeysRemoved: number;
}

/**
 * Starts the account's next epoch inside the caller's transaction (the user row locked by it): `passwordHash` is the
 * mail reader's password; every sign-in, trusted device, API key, daemon client and mailed code of the account ends,
 * and its SSH keys are removed (a key registered by whoever held the account would reach what the owner rents).
 */
export async function startAfresh(
  trx: Kysely<AuthDatabase>,
  userId: string,
  passwordHash: string,
  reason: string,
  now: Date,
): Promise<FreshStart> {
  const user = await startNextEpoch(trx, userId, passwordHash, now);
  await retireEmailTokens(trx, userId, 'reset_password', now);
  await retireEmailTokens(trx, userId, 'verify_email', now);
  await revokeUserFamilies(trx, userId, reason);
  await forgetUserDevices(trx, userId);
  const keysRevoked = await revokeUserApiKeys(trx, userId);
  const clientsRevoked = await revokeOwnedClients(trx, userId);
  const sshKeysRemoved = await deleteUserSshKeys(trx, userId);
  return { user, keysRevoked, clientsRevoked, sshKeysRemoved };
}

/**
 * The epoch a credential made by `actor` for `userId` records: that of the actor's sign-in (so a key made by a sign-in
 * that a fresh start ended, however the two interleave, dies with it), else the user's current one.
 */
export async function epochOf(ctx: Pick<AuthContext, 'db'>, actor: Principal, userId: string): Promise<number> {
  const ofSignIn = actor.sessionId && actor.subject === userId ? await signInEpoch(ctx.db, actor.sessionId) : undefined;
  if (ofSignIn !== undefined) return ofSignIn;
  const user = await findUserById(ctx.db, userId);
  if (!user) throw authErrors.userGone();
  return user.epoch;
}
