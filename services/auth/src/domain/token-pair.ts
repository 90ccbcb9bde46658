/**
 * Issuing an access token (a signed JWT) with a refresh token (an opaque
 * random value, stored only as its SHA-256 hash, in a family).
 */
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { durationMs } from '@gpu/common';
import type { Kysely } from 'kysely';
import type { ClientRow } from '../db/client-repository.ts';
import { insertRefreshToken } from '../db/refresh-token-repository.ts';
import type { AuthDatabase } from '../db/schema.ts';
import type { DeviceWrite } from '../db/trusted-device-repository.ts';
import type { UserRow } from '../db/user-repository.ts';
import type { AuthContext } from './context.ts';

export interface TokenPair {
  access_token: string;
  refresh_token: string;
  token_type: 'bearer';
  /** Seconds until the access token expires. */
  expires_in: number;
}

/** SHA-256 hex of a refresh token: what the database holds and looks up by. */
export function hashRefreshToken(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}

/** Signs an access token for `sub` with the platform's standard claims and `extra`. */
async function signAccessToken(
  ctx: AuthContext,
  sub: string,
  extra: Record<string, unknown>,
  lifetimeSeconds?: number,
): Promise<{ token: string; expiresIn: number }> {
  const { jwt } = ctx.config;
  const expiresIn = lifetimeSeconds ?? jwt.access_token_expire_minutes * 60;
  const iat = Math.floor(Date.now() / 1000);
  const token = await ctx.keys.sign({
    iss: jwt.issuer,
    sub,
    aud: jwt.audience,
    iat,
    exp: iat + expiresIn,
    jti: randomUUID(),
    ...extra,
  });
  return { token, expiresIn };
}

/**
 * A signed access token for the user, with the claims of docs/conventions.md; `sid`: the sign-in it belongs to (its
 * refresh-token family), so the user's device list can say which one is theirs.
 */
export function issueAccessToken(
  ctx: AuthContext,
  user: Pick<UserRow, 'id' | 'roles' | 'email_verified_at'>,
  sid?: string,
) {
  return signAccessToken(ctx, user.id, {
    roles: [...user.roles].sort(),
    ...verifiedClaim(user),
    ...(sid ? { sid } : {}),
  });
}

/**
 * `email_verified: true` (OpenID Connect's claim) when the user verified their address: what other services check
 * before an action `access.require_verified_email` names. Read at each login, refresh and key exchange.
 */
const verifiedClaim = (user: Pick<UserRow, 'email_verified_at'>) =>
  user.email_verified_at ? { email_verified: true } : {};

/** Who a token pair is issued to: the caller's address and `User-Agent`, shown in the user's list of sign-ins. */
export interface TokenOrigin {
  ip: string;
  userAgent?: string;
}

/**
 * An API key's access token: its user's roles but `admin` (an admin acts as one only through their own sign-in), the
 * key's scopes (`scope`, space-separated) and its ID (`key_id`), for at most `lifetimeSeconds`: how long a revoked key's
 * last token can still be used.
 */
export function issueApiKeyToken(
  ctx: AuthContext,
  user: Pick<UserRow, 'id' | 'roles' | 'email_verified_at'>,
  key: { id: string; scopes: readonly string[] },
  lifetimeSeconds: number,
) {
  const roles = user.roles.filter((r) => r !== 'admin').sort();
  const claims = { roles, ...verifiedClaim(user), scope: [...key.scopes].join(' '), key_id: key.id };
  return signAccessToken(ctx, user.id, claims, lifetimeSeconds);
}

/**
 * A machine client's access token (RFC 9068 §2.2: `sub` and `client_id` are the client's ID); a daemon's names
 * the provider owner it acts for in `owner_id`.
 */
export function issueClientToken(ctx: AuthContext, client: Pick<ClientRow, 'id' | 'role' | 'owner_id'>) {
  return signAccessToken(ctx, client.id, {
    roles: [client.role],
    client_id: client.id,
    ...(client.owner_id ? { owner_id: client.owner_id } : {}),
  });
}

/**
 * Issues an access token and a new refresh token. Without `family` the
 * refresh token starts a new family (a login) in the user's epoch; with it, it continues one (a rotation) in the
 * family's. A login's `device` write goes in the same statement as the refresh token.
 */
export async function issueTokenPair(
  ctx: AuthContext,
  db: Kysely<AuthDatabase>,
  user: Pick<UserRow, 'id' | 'roles' | 'email_verified_at' | 'epoch'>,
  family?: { familyId: string; parentId: string; epoch: number },
  device?: DeviceWrite,
  origin?: TokenOrigin,
): Promise<TokenPair> {
  const refreshToken = randomBytes(32).toString('base64url');
  const familyId = family?.familyId ?? randomUUID();
  await insertRefreshToken(
    db,
    {
      family_id: familyId,
      user_agent: origin?.userAgent?.slice(0, 200) ?? null,
      ip: origin?.ip ?? null,
      parent_id: family?.parentId ?? null,
      user_id: user.id,
      token_hash: hashRefreshToken(refreshToken),
      expires_at: new Date(Date.now() + durationMs(ctx.config.jwt.refresh_token_expire)),
      epoch: family?.epoch ?? user.epoch,
    },
    device,
  );
  const access = await issueAccessToken(ctx, user, familyId);
  return {
    access_token: access.token,
    refresh_token: refreshToken,
    token_type: 'bearer',
    expires_in: access.expiresIn,
  };
}
