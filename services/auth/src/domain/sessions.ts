/**
 * Login, refresh-token rotation with reuse detection, and logout.
 *
 * Every refresh exchanges the presented token for a new one in the same
 * family. A token presented again after it was exchanged means two parties
 * hold it (a leak): the whole family is revoked and its holder must log in
 * again. Within `refresh_reuse_interval` of the exchange a repeat is taken
 * for a concurrent request of the same client and answered with a new token
 * of the family instead.
 */
import { createHash, randomBytes } from 'node:crypto';
import { durationMs } from '@gpu/common';
import type { Kysely } from 'kysely';
import {
  findRefreshToken,
  findRefreshTokenForUpdate,
  markUsed,
  type RefreshTokenRow,
  revokeFamily,
} from '../db/refresh-token-repository.ts';
import type { AuthDatabase } from '../db/schema.ts';
import type { DeviceWrite } from '../db/trusted-device-repository.ts';
import { findUserForLogin, lockUser, shareUser, type UserRow, updatePasswordHash } from '../db/user-repository.ts';
import { authErrors } from '../errors.ts';
import { auditedChange, type RecordAudit } from './audit.ts';
import type { AuthContext } from './context.ts';
import { normaliseEmail } from './email.ts';
import { consumeLoginAttempt, loginLimits } from './login-limits.ts';
import { normalisePassword } from './passwords/index.ts';
import { hashRefreshToken, issueTokenPair, type TokenPair } from './token-pair.ts';

/**
 * Checks email and password and starts a session. An unknown email and a
 * wrong password give the same error after the same work (a dummy hash is verified).
 *
 * Guessing is limited by account and source together (login-limits.ts), so a stranger's failed attempts never lock
 * the owner out: a client that has logged in to the account before presents the `device_token` that login gave it
 * and is held to a limit of its own; any other is limited per account from its source, under a much higher ceiling
 * per account. A successful login from an unknown client returns a new device token.
 */
export async function login(
  ctx: AuthContext,
  input: { email: string; password: string; device_token?: string },
  clientIp: string,
  userAgent?: string,
): Promise<TokenPair & { device_token: string }> {
  const limits = ctx.config.rate_limit;
  const email = normaliseEmail(input.email);
  await consumeLoginAttempt(ctx, clientIp);
  // One read: the user and, with a device token, that user's trusted device.
  const user = await findUserForLogin(
    ctx.db,
    email,
    input.device_token ? hashDeviceToken(input.device_token) : undefined,
  );
  const device = user?.device_id ?? undefined;
  const guard = loginLimits(ctx, { email, epoch: user?.epoch ?? 0 }, clientIp, device);
  await guard.check();
  const password = normalisePassword(input.password);
  const ok = user ? await ctx.hasher.verify(user.password_hash, password) : await ctx.hasher.verifyDummy(password);
  if (!user || !ok) {
    await guard.failed();
    throw authErrors.invalidCredentials();
  }
  const deviceToken = device ? input.device_token! : randomBytes(32).toString('base64url');
  const deviceWrite: DeviceWrite = device
    ? { touch: device }
    : {
        insert: {
          user_id: user.id,
          token_hash: hashDeviceToken(deviceToken),
          expires_at: new Date(Date.now() + durationMs(limits.device_token_lifetime)),
          epoch: user.epoch,
        },
      };
  const origin = { ip: clientIp, ...(userAgent ? { userAgent } : {}) };
  const pair = await underCheckedPassword(ctx, user, password, async (trx, held, rehashed) => {
    if (rehashed) {
      await updatePasswordHash(trx, user.id, rehashed);
      ctx.logger.info({ user_id: user.id }, 'password rehashed with the current argon2id parameters');
    }
    // One write: the device row (new, or its use) and the refresh token, in one statement.
    return issueTokenPair(ctx, trx, held, undefined, deviceWrite, origin);
  });
  return { ...pair, device_token: deviceToken };
}

/**
 * Runs `write` with the account held as `password` was checked against (alone when the hash is to be rehashed:
 * `rehashed`, to write): an account started afresh meanwhile, or whose password changed, refuses it (401
 * INVALID_CREDENTIALS: a sign-in written after a password change would outlive its sign-outs, and a rehash must never
 * write the old password over a new one). Another hash of the same password (a concurrent login's rehash) is checked
 * again, outside the lock (argon2 is slow), and tried once more.
 */
export async function underCheckedPassword<T>(
  ctx: AuthContext,
  user: UserRow,
  password: string,
  write: (trx: Kysely<AuthDatabase>, held: UserRow, rehashed: string | null, record: RecordAudit) => Promise<T>,
  opts: { replacing?: boolean } = {},
): Promise<T> {
  let checked = user.password_hash;
  for (let tries = 0; ; tries++) {
    // `replacing` (a password change, which signs out too: revokingSignIns's lock): no rehash, and the account alone.
    const rehashed = !opts.replacing && ctx.hasher.needsRehash(checked) ? await ctx.hasher.hash(password) : null;
    type Outcome = { done: T } | { changed: string } | { refused: true };
    const outcome = await auditedChange(ctx, async (trx, record): Promise<Outcome> => {
      const held = rehashed || opts.replacing ? await lockUser(trx, user.id) : await shareUser(trx, user.id);
      if (!held || held.epoch !== user.epoch) return { refused: true };
      if (held.password_hash !== checked) return { changed: held.password_hash };
      return { done: await write(trx, held, rehashed, record) };
    });
    if ('done' in outcome) return outcome.done;
    if ('refused' in outcome || tries > 0 || !(await ctx.hasher.verify(outcome.changed, password))) {
      throw authErrors.invalidCredentials();
    }
    checked = outcome.changed;
  }
}

/**
 * Revokes sign-ins of the user (`revoke`, in one transaction) with the account locked. A refresh holds the account
 * shared from before it reads its token until its new one is written: a revocation comes first (the refresh finds its
 * token revoked) or waits for the refresh and revokes the token it made too. (Unlocked, a revocation's UPDATE cannot
 * see a token written after it began, and that device stayed signed in.)
 */
export function revokingSignIns<T>(
  ctx: AuthContext,
  userId: string,
  revoke: (trx: Kysely<AuthDatabase>, record: RecordAudit) => Promise<T>,
): Promise<T> {
  return auditedChange(ctx, async (trx, record) => {
    await lockUser(trx, userId);
    return revoke(trx, record);
  });
}

const hashDeviceToken = (token: string) => createHash('sha256').update(token).digest('hex');

type RefreshOutcome =
  | { pair: TokenPair }
  | { failure: 'invalid' | 'expired' | 'revoked' | 'reused' | 'gone'; familyId?: string; userId?: string };

/** Why a token as read refreshes nothing (each state is for good: a token is never unrevoked, nor made younger). */
function spentToken(row: RefreshTokenRow, now: Date, reuseIntervalMs: number): RefreshOutcome | undefined {
  const ids = { familyId: row.family_id, userId: row.user_id };
  if (row.revoked_at) return { failure: 'revoked', ...ids };
  if (new Date(row.expires_at) <= now) return { failure: 'expired', ...ids };
  // Revoked after this transaction, with the account locked (a refresh of the family under way finishes first).
  if (row.used_at && now.getTime() - new Date(row.used_at).getTime() > reuseIntervalMs) {
    return { failure: 'reused', ...ids };
  }
  return undefined;
}

/** Exchanges a refresh token for a new access token and a new refresh token. */
export async function refresh(
  ctx: AuthContext,
  refreshToken: string,
  clientIp: string,
  userAgent?: string,
): Promise<TokenPair> {
  const limits = ctx.config.rate_limit;
  await ctx.limiter.consume(limits.refresh_per_ip, 'refresh-ip', clientIp);
  const reuseIntervalMs = durationMs(ctx.config.jwt.refresh_reuse_interval);
  const hash = hashRefreshToken(refreshToken);
  const outcome = await ctx.db.transaction().execute(async (trx): Promise<RefreshOutcome> => {
    const seen = await findRefreshToken(trx, hash);
    if (!seen) return { failure: 'invalid' };
    const early = spentToken(seen, new Date(), reuseIntervalMs);
    if (early) return early;
    // Counted before the account is held (on the transaction's connection: no second one is taken meanwhile), so that
    // the refreshes the account's limit refuses hold nothing: a stream of them, each holding the account shared,
    // could otherwise keep a sign-out of every device (which takes it alone) waiting for as long as it lasts.
    await ctx.limiter.consume(limits.refresh_per_account, 'refresh-account', seen.user_id, trx);
    // The account, shared (a revocation of its sign-ins takes it alone: revokingSignIns), then the token.
    const user = await shareUser(trx, seen.user_id);
    const row = await findRefreshTokenForUpdate(trx, hash);
    if (!row) return { failure: 'invalid' };
    const now = new Date();
    const ids = { familyId: row.family_id, userId: row.user_id };
    const refused = spentToken(row, now, reuseIntervalMs);
    if (refused) return refused;
    if (!user) return { failure: 'gone', ...ids };
    // A sign-in of the account's epoch before: whoever proved the address started it afresh (accounts/epochs.ts).
    if (row.epoch !== user.epoch) return { failure: 'revoked', ...ids };
    if (!row.used_at) await markUsed(trx, row.id, now);
    const origin = { ip: clientIp, ...(userAgent ? { userAgent } : {}) };
    const family = { familyId: row.family_id, parentId: row.id, epoch: row.epoch };
    return { pair: await issueTokenPair(ctx, trx, user, family, undefined, origin) };
  });
  if ('pair' in outcome) return outcome.pair;
  switch (outcome.failure) {
    case 'reused':
      // A spent token presented again: a copy of it is in someone else's hands (a theft's sign).
      await revokingSignIns(ctx, outcome.userId!, async (trx, record) => {
        if ((await revokeFamily(trx, outcome.familyId!, 'reuse_detected')) === 0) return;
        await record(
          {
            action: 'refresh_token_reused',
            outcome: 'refused',
            actor: { id: outcome.userId!, kind: 'user' },
            target: `sign_in:${outcome.familyId}`,
            address: clientIp,
          },
          'refresh token reuse detected: token family revoked',
          { revocation: true },
        );
      });
      throw authErrors.refreshTokenReused();
    case 'revoked':
      throw authErrors.refreshTokenRevoked();
    case 'expired':
      throw authErrors.refreshTokenExpired();
    case 'gone':
      throw authErrors.userGone();
    default:
      throw authErrors.invalidRefreshToken();
  }
}

/** Revokes the family of the presented refresh token (the session it belongs to). Unknown tokens are ignored. */
export async function logout(ctx: AuthContext, refreshToken: string): Promise<void> {
  const row = await findRefreshToken(ctx.db, hashRefreshToken(refreshToken));
  if (!row) return;
  await revokingSignIns(ctx, row.user_id, async (trx, record) => {
    if ((await revokeFamily(trx, row.family_id, 'logout')) === 0) return;
    await record(
      { action: 'logged_out', actor: { id: row.user_id, kind: 'user' }, target: `sign_in:${row.family_id}` },
      'logged out',
      { revocation: true },
    );
  });
}
