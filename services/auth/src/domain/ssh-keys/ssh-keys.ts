/**
 * Users' SSH public keys: a renter registers the keys of their own machines, and reaches what they rent through the
 * platform with OpenSSH's own client; the platform's services read a user's keys to let them in.
 *
 * - The user themselves, signed in, adds and removes keys (these actions take no API key: a key, a credential of its
 *   own, never adds a way into the user's machines); an API key with `read` lists them. Another user's key is 404.
 * - A key is one OpenSSH public-key line (public-key.ts); its comment names it unless a name is given. A user
 *   registers a key once (409 `SSH_KEY_EXISTS`) and holds at most `MAX_SSH_KEYS_PER_USER` (409 `TOO_MANY_SSH_KEYS`).
 * - Adding and removing are in the audit trail. A key is added under the account's row lock, by a sign-in of the
 *   account's current epoch: a fresh start (accounts/epochs.ts) removes every key, and one added by a request that
 *   raced it is refused (401 `SIGN_IN_ENDED`), so whoever held the account before keeps no way in.
 * - Platform services (and admins) read any user's keys (`listUserSshKeys`).
 */
import { randomUUID } from 'node:crypto';
import { afterCursor, errors, isPrivileged, keysetPage, type Principal } from '@gpu/common';
import { countSshKeys, deleteSshKey, insertSshKey, listSshKeys, type SshKeyRow } from '../../db/ssh-key-repository.ts';
import { findUserById, isUniqueViolation, lockUser } from '../../db/user-repository.ts';
import { authErrors } from '../../errors.ts';
import { epochOf } from '../accounts/index.ts';
import { auditedChange } from '../audit.ts';
import type { AuthContext } from '../context.ts';
import { signedInUser } from '../sign-ins.ts';
import { MAX_SSH_KEY_NAME_LENGTH, parsePublicKey } from './public-key.ts';

/** How many keys one user holds at most. */
export const MAX_SSH_KEYS_PER_USER = 50;

/** A key as its user and the platform's services see it. */
export type SshKey = SshKeyRow;

type Page = { limit: number; cursor?: string };

/** Registers a key for the signed-in user. */
export async function addSshKey(
  ctx: AuthContext,
  actor: Principal,
  input: { publicKey: string; name?: string },
): Promise<SshKey> {
  const userId = signedInUser(actor, 'their SSH keys');
  const key = parsePublicKey(input.publicKey);
  const name = input.name?.trim() || key.comment.slice(0, MAX_SSH_KEY_NAME_LENGTH).trim() || `${key.type} key`;
  try {
    return await auditedChange(ctx, async (trx, record) => {
      // The account's row lock orders this against a fresh start, which takes it too.
      const user = await lockUser(trx, userId);
      if (!user) throw authErrors.userGone();
      if ((await epochOf({ db: trx }, actor, userId)) !== user.epoch) throw authErrors.signInEnded();
      if ((await countSshKeys(trx, userId)) >= MAX_SSH_KEYS_PER_USER) {
        throw authErrors.tooManySshKeys(MAX_SSH_KEYS_PER_USER);
      }
      const row = await insertSshKey(trx, {
        id: randomUUID(),
        user_id: userId,
        name,
        type: key.type,
        fingerprint: key.fingerprint,
        public_key: key.publicKey,
      });
      await record(
        {
          action: 'ssh_key_added',
          actor,
          target: `ssh_key:${row.id}`,
          details: { name: row.name, type: row.type, fingerprint: row.fingerprint },
        },
        'SSH key added',
      );
      return row;
    });
  } catch (err) {
    if (isUniqueViolation(err)) throw authErrors.sshKeyExists(key.fingerprint);
    throw err;
  }
}

/** One page of the caller's own keys, oldest first (a user's sign-in, or an API key that may read). */
export async function listOwnSshKeys(ctx: AuthContext, actor: Principal, query: Page) {
  if (actor.kind !== 'user') throw authErrors.notAUser();
  return pageOfKeys(ctx, actor.subject, query);
}

/** One page of any user's keys, for the platform's services and admins; 404 for a user that does not exist. */
export async function listUserSshKeys(ctx: AuthContext, actor: Principal, userId: string, query: Page) {
  if (!isPrivileged(actor)) {
    throw errors.forbidden("only platform services and admins read another user's SSH keys", 'ROLE_REQUIRED');
  }
  if (!(await findUserById(ctx.db, userId))) throw authErrors.userNotFound(userId);
  return pageOfKeys(ctx, userId, query);
}

async function pageOfKeys(
  ctx: AuthContext,
  userId: string,
  query: Page,
): Promise<{ keys: SshKey[]; nextCursor: string | null }> {
  const rows = await listSshKeys(ctx.db, { userId, limit: query.limit + 1, after: afterCursor(query.cursor) });
  const page = keysetPage(rows, query.limit);
  return { keys: page.items.map(({ cursor_at: _, ...row }) => row), nextCursor: page.nextCursor };
}

/** Removes one of the signed-in user's keys; another user's key, or one already removed, is 404. */
export async function removeSshKey(ctx: AuthContext, actor: Principal, id: string): Promise<void> {
  const userId = signedInUser(actor, 'their SSH keys');
  await auditedChange(ctx, async (trx, record) => {
    const removed = await deleteSshKey(trx, userId, id);
    if (!removed) throw authErrors.sshKeyNotFound(id);
    await record(
      {
        action: 'ssh_key_removed',
        actor,
        target: `ssh_key:${id}`,
        details: { name: removed.name, type: removed.type, fingerprint: removed.fingerprint },
      },
      'SSH key removed',
      { revocation: true },
    );
  });
}
