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
import { findRefreshToken, findRefreshTokenForUpdate, markUsed, revokeFamily } from '../db/refresh-token-repository.ts';
import type { DeviceWrite } from '../db/trusted-device-repository.ts';
import { findUserById, findUserForLogin, updatePasswordHash } from '../db/user-repository.ts';
import { authErrors } from '../errors.ts';
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
  if (ctx.hasher.needsRehash(user.password_hash)) {
    await updatePasswordHash(ctx.db, user.id, await ctx.hasher.hash(password));
    ctx.logger.info({ user_id: user.id }, 'password rehashed with the current argon2id parameters');
  }
  // One write: the device row (new, or its use) and the refresh token, in one statement.
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
  return { ...(await issueTokenPair(ctx, ctx.db, user, undefined, deviceWrite, origin)), device_token: deviceToken };
}

const hashDeviceToken = (token: string) => createHash('sha256').update(token).digest('hex');

type RefreshOutcome =
  | { pair: TokenPair }
  | { failure: 'invalid' | 'expired' | 'revoked' | 'reused' | 'gone'; familyId?: string; userId?: string };

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
  const outcome = await ctx.db.transaction().execute(async (trx): Promise<RefreshOutcome> => {
    const row = await findRefreshTokenForUpdate(trx, hashRefreshToken(refreshToken));
    if (!row) return { failure: 'invalid' };
    const now = new Date();
    const ids = { familyId: row.family_id, userId: row.user_id };
    if (row.revoked_at) return { failure: 'revoked', ...ids };
    if (new Date(row.expires_at) <= now) return { failure: 'expired', ...ids };
    if (row.used_at && now.getTime() - new Date(row.used_at).getTime() > reuseIntervalMs) {
      await revokeFamily(trx, row.family_id, 'reuse_detected', now);
      return { failure: 'reused', ...ids };
    }
    // Counted on the transaction's connection: no second connection is taken while this one is held.
    await ctx.limiter.consume(limits.refresh_per_account, 'refresh-account', row.user_id, trx);
    const user = await findUserById(trx, row.user_id);
    if (!user) return { failure: 'gone', ...ids };
    // A sign-in of the account's epoch before: whoever proved the address started it afresh (account-epochs.ts).
    if (row.epoch !== user.epoch) return { failure: 'revoked', ...ids };
    if (!row.used_at) await markUsed(trx, row.id, now);
    const origin = { ip: clientIp, ...(userAgent ? { userAgent } : {}) };
    const family = { familyId: row.family_id, parentId: row.id, epoch: row.epoch };
    return { pair: await issueTokenPair(ctx, trx, user, family, undefined, origin) };
  });
  if ('pair' in outcome) return outcome.pair;
  const log = { family_id: outcome.familyId, user_id: outcome.userId, ip: clientIp };
  switch (outcome.failure) {
    case 'reused':
      ctx.logger.warn(log, 'refresh token reuse detected: token family revoked');
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
  const revoked = await revokeFamily(ctx.db, row.family_id, 'logout');
  if (revoked > 0) ctx.logger.info({ family_id: row.family_id, user_id: row.user_id }, 'logged out');
}
