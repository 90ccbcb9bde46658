/**
 * Users' API keys: a renter's or provider's programs act for them with a key, never with their password.
 *
 * - A user creates a key with a name, scopes (`@gpu/common`'s `SCOPES`: what it may do) and an optional expiry. The
 *   key (`gpk_`, its ID and 256 random bits: a secret scanner finds one by its prefix) is shown once, stored
 *   only as its SHA-256 (as client secrets are), listed with its prefix and its last use, and revoked at once.
 * - Only the user's own sign-in manages keys: the key routes take no API key (a key can never make a wider one), and
 *   another user's key answers 404.
 * - A program exchanges its key at `POST /api/v1/auth/token` (`grant_type=api_key`) for an access token of
 *   `api_keys.token_ttl` (2 minutes) carrying the user's roles (never `admin`), the scopes and the key's ID; every
 *   service checks a route's scope against them. A revoked or expired key gets no token from any instance (the key is
 *   read from the database at each exchange); a token already issued lives out its 2 minutes. Failures are one answer
 *   (401 `INVALID_CLIENT`), rate-limited per address, and failures per key and address.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { afterCursor, durationMs, errors, keysetPage, type Principal, type Scope } from '@gpu/common';
import {
  type ApiKeyRow,
  countActiveApiKeys,
  findApiKey,
  findApiKeyOfUser,
  insertApiKey,
  listApiKeys,
  revokeApiKey as revokeRow,
  touchApiKey,
} from '../db/api-key-repository.ts';
import { findUserById, isUniqueViolation, lockUser } from '../db/user-repository.ts';
import { authErrors } from '../errors.ts';
import { epochOf } from './accounts/index.ts';
import { audit, auditedChange } from './audit.ts';
import { hashSecret, secretMatches } from './client-secret.ts';
import type { AuthContext } from './context.ts';
import { signedInUser } from './sign-ins.ts';
import { issueApiKeyToken } from './token-pair.ts';

/** Keys start with this, so secret scanners and people can tell one at a glance. */
const KEY_PREFIX = 'gpk_';
/** `gpk_`, the key's ID (32 hex digits) and its secret (32 random bytes, base64url). */
const KEY_FORMAT = /^gpk_([0-9a-f]{32})([A-Za-z0-9_-]{43})$/;

/** A key as its user sees it (never its secret). */
export type ApiKey = Omit<ApiKeyRow, 'secret_hash'>;

const shown = ({ secret_hash: _, ...key }: ApiKeyRow): ApiKey => key;

/** Creates a key for the signed-in user: the key (its whole text, shown once) and what is kept of it. */
export async function createApiKey(
  ctx: AuthContext,
  actor: Principal,
  input: { name: string; scopes: Scope[]; expiresAt?: Date },
): Promise<{ key: ApiKey; secret: string }> {
  const userId = signedInUser(actor, 'their API keys');
  if (input.expiresAt && input.expiresAt.getTime() <= Date.now()) {
    throw errors.validation('expires_at is in the past', [
      { path: 'body.expires_at', message: 'must be in the future' },
    ]);
  }
  const id = randomUUID();
  const secret = `${KEY_PREFIX}${id.replaceAll('-', '')}${randomBytes(32).toString('base64url')}`;
  const epoch = await epochOf(ctx, actor, userId);
  try {
    // Counted and written with the user locked: keys made at once do not both pass the count.
    const row = await auditedChange(ctx, async (trx, record) => {
      await lockUser(trx, userId);
      if ((await countActiveApiKeys(trx, userId)) >= ctx.config.api_keys.max_per_user) {
        throw errors.conflict(
          'TOO_MANY_API_KEYS',
          `a user holds at most ${ctx.config.api_keys.max_per_user} keys: revoke one`,
        );
      }
      const made = await insertApiKey(trx, {
        id,
        user_id: userId,
        name: input.name,
        prefix: secret.slice(0, KEY_PREFIX.length + 8),
        secret_hash: hashSecret(secret),
        scopes: [...new Set(input.scopes)].sort(),
        expires_at: input.expiresAt ?? null,
        epoch,
      });
      await record(
        {
          action: 'api_key_created',
          actor,
          target: `api_key:${id}`,
          details: { scopes: made.scopes, name: made.name },
        },
        'API key created',
      );
      return made;
    });
    return { key: shown(row), secret };
  } catch (err) {
    if (isUniqueViolation(err))
      throw errors.conflict('API_KEY_NAME_TAKEN', `you already have a key named ${input.name}`);
    throw err;
  }
}

/** One page of the signed-in user's keys, oldest first (the platform's keyset paging). */
export async function listOwnApiKeys(
  ctx: AuthContext,
  actor: Principal,
  query: { limit: number; cursor?: string; include_revoked: boolean },
): Promise<{ keys: ApiKey[]; nextCursor: string | null }> {
  const rows = await listApiKeys(ctx.db, {
    userId: signedInUser(actor, 'their API keys'),
    includeRevoked: query.include_revoked,
    limit: query.limit + 1,
    after: afterCursor(query.cursor),
  });
  const page = keysetPage(rows, query.limit);
  return { keys: page.items.map(({ cursor_at: _, ...row }) => shown(row)), nextCursor: page.nextCursor };
}

/** Revokes one of the signed-in user's keys (again: nothing changes); another user's key is 404. */
export async function revokeApiKey(ctx: AuthContext, actor: Principal, id: string): Promise<ApiKey> {
  const userId = signedInUser(actor, 'their API keys');
  const key = await findApiKey(ctx.db, id);
  if (!key || key.user_id !== userId) throw errors.notFound('API_KEY_NOT_FOUND', `API key ${id} not found`);
  // Revoked once: only the request that revoked it records it.
  const revoked = await auditedChange(ctx, async (trx, record) => {
    const row = await revokeRow(trx, id);
    if (row) {
      await record({ action: 'api_key_revoked', actor, target: `api_key:${id}` }, 'API key revoked', {
        revocation: true,
      });
    }
    return row;
  });
  return shown(revoked ?? (await findApiKey(ctx.db, id)) ?? key);
}

/**
 * The `api_key` grant: an access token for a valid key (known, its hash matching, not revoked, not expired, of its
 * user's current epoch). An unknown key or a wrong secret is 401 `INVALID_CLIENT`, counted per key and address (429
 * past `token_failures_per_client`); a key whose whole text is right but that was revoked or has expired is told so
 * (`API_KEY_REVOKED`, `API_KEY_EXPIRED`, and `API_KEY_NO_ROLE` when its user holds only `admin`, which keys never
 * carry): only its holder can send it, and a program that keeps trying it reads why.
 */
export async function grantApiKeyToken(
  ctx: AuthContext,
  apiKey: string,
  clientIp: string,
): Promise<{ token: string; expiresIn: number }> {
  const limits = ctx.config.rate_limit;
  await ctx.limiter.consume(limits.token_per_ip, 'token-ip', clientIp);
  const match = KEY_FORMAT.exec(apiKey);
  const hexId = match?.[1];
  const id = hexId
    ? `${hexId.slice(0, 8)}-${hexId.slice(8, 12)}-${hexId.slice(12, 16)}-${hexId.slice(16, 20)}-${hexId.slice(20)}`
    : undefined;
  // Failures count per key and address: a key's ID is in every token it gets, so a count per key alone would let
  // anyone who saw one lock its program out.
  const failures = id ? `${id}:${clientIp}` : undefined;
  if (failures) await ctx.limiter.check(limits.token_failures_per_client, 'token-key', failures);
  // The key with its user's epoch (undefined once the user is gone: as unknown).
  const key = id ? await findApiKeyOfUser(ctx.db, id) : undefined;
  let refusal: 'unknown key' | 'wrong secret' | 'revoked' | 'expired' | 'user gone' | 'no role' | undefined;
  if (!key) refusal = 'unknown key';
  else if (!secretMatches(apiKey, key.secret_hash)) refusal = 'wrong secret';
  else if (key.revoked_at || !key.current) refusal = 'revoked';
  else if (key.expires_at && new Date(key.expires_at).getTime() <= Date.now()) refusal = 'expired';
  const user = key && !refusal ? await findUserById(ctx.db, key.user_id) : undefined;
  if (key && !refusal && !user) refusal = 'user gone';
  // Its tokens never carry admin (token-pair.ts): a user left with admin alone would get a token no service takes.
  if (user && !refusal && !user.roles.some((role) => role !== 'admin')) refusal = 'no role';
  if (!key || !user || refusal) {
    const known = refusal === 'revoked' || refusal === 'expired' || refusal === 'no role';
    if (failures && !known) await ctx.limiter.hit(limits.token_failures_per_client, 'token-key', failures);
    await audit(
      ctx,
      {
        action: 'api_key_refused',
        outcome: 'refused',
        target: id ? `api_key:${id}` : null,
        details: { reason: refusal },
        address: clientIp,
      },
      'API key refused',
    );
    throw known ? authErrors.apiKeyRefused(refusal as 'revoked' | 'expired' | 'no role') : authErrors.invalidClient();
  }
  // Never past the key's own expiry.
  const untilExpiry = key.expires_at
    ? (new Date(key.expires_at).getTime() - Date.now()) / 1000
    : Number.POSITIVE_INFINITY;
  const ttl = Math.max(1, Math.floor(Math.min(durationMs(ctx.config.api_keys.token_ttl) / 1000, untilExpiry)));
  const issued = await issueApiKeyToken(ctx, user, key, ttl);
  touchApiKey(ctx.db, key.id).catch((err) => ctx.logger.warn({ err }, 'recording API key use failed'));
  return issued;
}
