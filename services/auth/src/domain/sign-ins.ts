/**
 * A user's signed-in devices: each login starts a sign-in (a family of refresh tokens, rotated at each refresh), and
 * the user lists theirs, signs any out, or all but the one they use; a password change signs out every other one.
 *
 * - A sign-in is listed (oldest first, paged) while one of its tokens is alive (not used, revoked nor expired), with when it began, when it
 *   was last refreshed, when it expires, and the address and `User-Agent` of its last refresh; the caller's own is
 *   marked `current` (its access token's `sid`).
 * - Signing a device out revokes its refresh tokens at once: it cannot refresh again. An access token it already had
 *   is refused here at once (401 SIGN_IN_ENDED, accounts/epochs.ts) and works at the other services until it expires
 *   (`jwt.access_token_expire_minutes`, 15 minutes).
 * - Only the user's own sign-in does this (these routes take no API key); another user's sign-in answers 404.
 * - Changing the password takes the current one (a wrong one counts against that sign-in, as a trusted device's failed
 *   login does, and is refused as one), meets the same policy as registration, and signs out every other device.
 */
import { afterCursor, errors, keysetPage, type Principal } from '@gpu/common';
import {
  countLiveSignIns,
  familyOwner,
  liveSignIns,
  revokeFamily,
  revokeUserFamilies,
  type SignInRow,
} from '../db/refresh-token-repository.ts';
import { findUserById, updatePasswordHash } from '../db/user-repository.ts';
import { authErrors } from '../errors.ts';
import type { AuthContext } from './context.ts';
import { loginLimits } from './login-limits.ts';
import { noticePasswordChanged } from './mail/notices.ts';
import { normalisePassword } from './passwords/index.ts';
import { revokingSignIns, underCheckedPassword } from './sessions.ts';

/**
 * The signed-in user, for what only they manage, signed in (`what`: their sign-ins, their API keys): never an API key's
 * token nor a machine client.
 */
export function signedInUser(actor: Principal, what: string): string {
  if (actor.kind !== 'user' || actor.scopes) {
    throw errors.forbidden(`only the user themselves, signed in, manages ${what}`, 'USER_SIGN_IN_REQUIRED');
  }
  return actor.subject;
}

export type SignIn = SignInRow & { current: boolean };

/** One page of the user's sign-ins, the oldest first (the platform's keyset paging), their own marked. */
export async function listSignIns(
  ctx: AuthContext,
  actor: Principal,
  query: { limit: number; cursor?: string },
): Promise<{ signIns: SignIn[]; nextCursor: string | null }> {
  const rows = await liveSignIns(ctx.db, {
    userId: signedInUser(actor, 'their sign-ins'),
    now: new Date(),
    limit: query.limit + 1,
    after: afterCursor(query.cursor),
  });
  const page = keysetPage(rows, query.limit);
  return { signIns: page.items.map((r) => ({ ...r, current: r.id === actor.sessionId })), nextCursor: page.nextCursor };
}

/** Signs one of the user's devices out (again: nothing changes); another user's sign-in is 404. */
export async function signOut(ctx: AuthContext, actor: Principal, familyId: string): Promise<void> {
  const userId = signedInUser(actor, 'their sign-ins');
  if ((await familyOwner(ctx.db, familyId)) !== userId) {
    throw errors.notFound('SIGN_IN_NOT_FOUND', `sign-in ${familyId} not found`);
  }
  await revokingSignIns(ctx, userId, async (trx, record) => {
    // Signed out once: only the request that did it records it.
    if ((await revokeFamily(trx, familyId, 'signed_out')) === 0) return;
    await record({ action: 'signed_out', actor, target: `sign_in:${familyId}` }, 'device signed out', {
      revocation: true,
    });
  });
}

/** Signs out every device of the user but the caller's own (`includeCurrent`: that one too); how many were. */
export async function signOutOthers(ctx: AuthContext, actor: Principal, includeCurrent: boolean): Promise<number> {
  const userId = signedInUser(actor, 'their sign-ins');
  // Counted under the account's lock too: a login or refresh writing a sign-in meanwhile is not counted as signed out.
  return revokingSignIns(ctx, userId, async (trx, record) => {
    const now = new Date();
    const before = await countLiveSignIns(trx, userId, now);
    await revokeUserFamilies(trx, userId, 'signed_out', includeCurrent ? undefined : actor.sessionId);
    const signedOut = before - (await countLiveSignIns(trx, userId, now));
    await record(
      { action: 'signed_out_all', actor, target: `user:${userId}`, details: { include_current: includeCurrent } },
      'devices signed out',
      { revocation: true },
    );
    return signedOut;
  });
}

/** Changes the user's password (the current one checked), and signs out every other device. */
export async function changePassword(
  ctx: AuthContext,
  actor: Principal,
  input: { currentPassword: string; newPassword: string },
): Promise<void> {
  const userId = signedInUser(actor, 'their sign-ins');
  const user = await findUserById(ctx.db, userId);
  if (!user) throw authErrors.userGone();
  // A wrong current password counts against this sign-in alone, as a trusted device's failed logins do: nobody else's
  // failures refuse it, and a stolen access token guesses no more than a device may.
  const guard = loginLimits(ctx, { email: user.email, epoch: user.epoch }, '', `sign-in ${actor.sessionId ?? userId}`);
  await guard.check();
  if (!(await ctx.hasher.verify(user.password_hash, normalisePassword(input.currentPassword)))) {
    await guard.failed();
    throw authErrors.invalidCredentials();
  }
  ctx.policy.check(input.newPassword, user.email);
  const hash = await ctx.hasher.hash(normalisePassword(input.newPassword));
  // The new password and the sign-outs at once, the account locked (as revokingSignIns locks it): a login with the old
  // password or a refresh under way finishes first (and is signed out) or is refused; a password changed since it was
  // checked refuses this change.
  await underCheckedPassword(
    ctx,
    user,
    normalisePassword(input.currentPassword),
    async (trx, _held, _rehashed, record) => {
      await updatePasswordHash(trx, userId, hash);
      await revokeUserFamilies(trx, userId, 'password_changed', actor.sessionId);
      await record(
        { action: 'password_changed', actor, target: `user:${userId}` },
        'password changed; other devices signed out',
      );
    },
    { replacing: true },
  );
  noticePasswordChanged(ctx, user);
}
