/**
 * Verification of the platform's access tokens (JWTs issued by the auth
 * service), for every service and the gateway. Works with the HS256 shared
 * secret, with the issuer's JWKS fetched over HTTP (cached, refreshed on an
 * unknown `kid`), or with a key resolver the caller supplies.
 */
import { createRemoteJWKSet, type JWTPayload, type JWTVerifyGetKey, errors as joseErrors, jwtVerify } from 'jose';
import { AppError, errors } from '../errors.ts';
import { ROLES, type Role } from './roles.ts';
import { isScope } from './scopes.ts';

/**
 * The claims of a verified access token (docs/conventions.md, "Tokens and access"). A machine client's token (client
 * credentials) also carries `client_id`, equal to its `sub` (RFC 9068 §2.2), and a daemon's carries `owner_id`,
 * the provider owner (a user ID) it acts for.
 */
export interface AccessTokenClaims {
  iss: string;
  sub: string;
  aud: string | string[];
  exp: number;
  iat: number;
  jti: string;
  roles: Role[];
  client_id?: string;
  owner_id?: string;
  /** An API key's token: its scopes (space-separated, RFC 8693 §4.2) and the key's ID. */
  scope?: string;
  key_id?: string;
  /** A user's sign-in token: the sign-in (refresh-token family) it belongs to. */
  sid?: string;
  /** A user's token: true when the user verified their e-mail address (OpenID Connect's claim). */
  email_verified?: boolean;
}

export interface TokenVerifierOptions {
  /** Expected `iss`. */
  issuer: string;
  /** Expected `aud` (one of them when several are given). */
  audience: string | string[];
  /** Shared secret for HS256 (the auth service's `SECRET_KEY`). */
  secret?: string;
  /** The auth service's JWKS URL, for asymmetric algorithms (EdDSA, ES256, RS256). */
  jwksUrl?: string;
  /** A key resolver, for callers that hold the keys themselves (the auth service). */
  getKey?: JWTVerifyGetKey;
  /** Accepted `alg` values; HS256 with a secret, the asymmetric ones otherwise. `none` is never accepted. */
  algorithms?: string[];
  /** Leeway for `exp`/`iat` between machines' clocks, in seconds (default 5). */
  clockToleranceSeconds?: number;
  /** How long a fetched JWKS is used before it is fetched again (default 10 minutes). */
  jwksCacheMaxAgeMs?: number;
  /** Least time between two JWKS fetches caused by unknown `kid`s (default 30 s). */
  jwksCooldownMs?: number;
  /** Time limit of one JWKS fetch (default 5 s). */
  jwksTimeoutMs?: number;
  /**
   * Verified tokens remembered until their `exp`, keyed by the exact token text,
   * so a client repeating its token skips the signature check (default 10,000; 0 turns it off).
   */
  cacheSize?: number;
}

/** Verifies access tokens; throws 401 AppErrors (`TOKEN_EXPIRED`, `INVALID_TOKEN`) or 503 when the JWKS is unreachable. */
export interface TokenVerifier {
  /**
   * The claims of a valid token. `at` checks the token as of another moment than now (its `exp` and `iat`): a
   * queued message is judged by the token it carried when it was sent.
   */
  verify(token: string, at?: Date): Promise<AccessTokenClaims>;
}

const HMAC_ALGORITHMS = ['HS256'];
const ASYMMETRIC_ALGORITHMS = ['EdDSA', 'Ed25519', 'ES256', 'RS256'];

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const invalid = (detail: string) => errors.unauthorized(`invalid access token: ${detail}`, 'INVALID_TOKEN');

/** The claims of a verified payload, or INVALID_TOKEN: the platform's tokens name users and clients by UUID. */
function claimsOf(payload: JWTPayload, nowSeconds: number, toleranceSeconds: number): AccessTokenClaims {
  const {
    roles,
    client_id: clientId,
    owner_id: ownerId,
    scope,
    key_id: keyId,
    sid,
    email_verified: emailVerified,
  } = payload as Record<string, unknown>;
  if (emailVerified !== undefined && typeof emailVerified !== 'boolean') throw invalid('email_verified is no boolean');
  if (sid !== undefined && (typeof sid !== 'string' || !UUID.test(sid))) throw invalid('sid is not a sign-in ID');
  if (!Array.isArray(roles) || roles.length === 0 || !roles.every((r) => (ROLES as readonly unknown[]).includes(r))) {
    throw invalid('no valid roles claim');
  }
  if (typeof payload.sub !== 'string' || !UUID.test(payload.sub)) throw invalid('sub is not a user or client ID');
  if (typeof payload.jti !== 'string' || payload.jti === '') throw invalid('no jti');
  if (typeof payload.iat !== 'number' || payload.iat > nowSeconds + toleranceSeconds) {
    throw invalid('issued in the future (iat)');
  }
  if (clientId !== undefined && clientId !== payload.sub) throw invalid('client_id differs from sub');
  if (ownerId !== undefined && (typeof ownerId !== 'string' || !UUID.test(ownerId))) {
    throw invalid('owner_id is not a user ID');
  }
  if (roles.includes('daemon') && (clientId === undefined || ownerId === undefined)) {
    throw invalid('a daemon token names its client and owner');
  }
  // An API key's token names its key and holds scopes the platform knows (none: it could do nothing).
  if ((scope === undefined) !== (keyId === undefined)) throw invalid('scope and key_id come together');
  if (scope !== undefined) {
    if (typeof scope !== 'string' || !scope.split(' ').every(isScope)) throw invalid('unknown scope');
    if (typeof keyId !== 'string' || !UUID.test(keyId)) throw invalid('key_id is not a key ID');
    if (clientId !== undefined) throw invalid('a machine client holds no API key scopes');
  }
  return {
    iss: payload.iss as string,
    sub: payload.sub,
    aud: payload.aud as string | string[],
    exp: payload.exp as number,
    iat: payload.iat,
    jti: payload.jti,
    roles: roles as Role[],
    ...(clientId !== undefined ? { client_id: clientId as string } : {}),
    ...(ownerId !== undefined ? { owner_id: ownerId as string } : {}),
    ...(scope !== undefined ? { scope: scope as string, key_id: keyId as string } : {}),
    ...(sid !== undefined ? { sid: sid as string } : {}),
    ...(emailVerified === true && clientId === undefined ? { email_verified: true } : {}),
  };
}

function toAuthError(err: unknown): AppError {
  if (err instanceof AppError) return err;
  if (err instanceof joseErrors.JWTExpired) return errors.unauthorized('access token expired', 'TOKEN_EXPIRED');
  if (err instanceof joseErrors.JWKSTimeout) return errors.dependencyUnavailable('jwks', err);
  if (err instanceof joseErrors.JOSEError) {
    return errors.unauthorized(`invalid access token: ${err.message}`, 'INVALID_TOKEN');
  }
  // Anything else comes from fetching the JWKS (connection refused, bad JSON, ...).
  return errors.dependencyUnavailable('jwks', err);
}

/** Builds a verifier from one of `secret`, `jwksUrl` or `getKey`. */
export function createTokenVerifier(opts: TokenVerifierOptions): TokenVerifier {
  let key: Uint8Array | JWTVerifyGetKey;
  if (opts.getKey) key = opts.getKey;
  else if (opts.jwksUrl) {
    key = createRemoteJWKSet(new URL(opts.jwksUrl), {
      cacheMaxAge: opts.jwksCacheMaxAgeMs ?? 600_000,
      cooldownDuration: opts.jwksCooldownMs ?? 30_000,
      timeoutDuration: opts.jwksTimeoutMs ?? 5_000,
    });
  } else if (opts.secret) key = new TextEncoder().encode(opts.secret);
  else throw new Error('createTokenVerifier needs a secret, a jwksUrl or a getKey');

  const algorithms = opts.algorithms ?? (opts.secret && !opts.getKey ? HMAC_ALGORITHMS : ASYMMETRIC_ALGORITHMS);
  if (algorithms.some((a) => a.toLowerCase() === 'none')) throw new Error('alg "none" is never accepted');
  const tolerance = opts.clockToleranceSeconds ?? 5;
  const verifyOptions = {
    issuer: opts.issuer,
    audience: opts.audience,
    algorithms,
    clockTolerance: tolerance,
    requiredClaims: ['iss', 'sub', 'aud', 'exp', 'iat', 'jti'],
  };
  const cacheSize = opts.cacheSize ?? 10_000;
  const cache = new Map<string, AccessTokenClaims>();

  return {
    async verify(token: string, at?: Date): Promise<AccessTokenClaims> {
      const now = (at?.getTime() ?? Date.now()) / 1000;
      const hit = cache.get(token);
      if (hit) {
        if (hit.exp > now && hit.iat <= now + tolerance) return hit;
        if (!at) cache.delete(token);
      }
      let claims: AccessTokenClaims;
      try {
        const options = at ? { ...verifyOptions, currentDate: at } : verifyOptions;
        const { payload } =
          typeof key === 'function' ? await jwtVerify(token, key, options) : await jwtVerify(token, key, options);
        claims = claimsOf(payload, now, tolerance);
      } catch (err) {
        throw toAuthError(err);
      }
      if (cacheSize > 0) {
        if (cache.size >= cacheSize) cache.delete(cache.keys().next().value as string);
        cache.set(token, claims);
      }
      return claims;
    },
  };
}
