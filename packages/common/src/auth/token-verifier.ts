/**
 * Verification of the platform's access tokens (JWTs issued by the auth
 * service), for every service and the gateway. Works with the HS256 shared
 * secret, with the issuer's JWKS fetched over HTTP (cached, refreshed on an
 * unknown `kid`), or with a key resolver the caller supplies.
 */
import { createRemoteJWKSet, type JWTPayload, type JWTVerifyGetKey, errors as joseErrors, jwtVerify } from 'jose';
import { AppError, errors } from '../errors.ts';

/** The roles a user can hold, as carried in the `roles` claim. */
export const ROLES = ['provider', 'renter', 'admin'] as const;
export type Role = (typeof ROLES)[number];

/** The claims of a verified access token (docs/conventions.md, "Tokens and access"). */
export interface AccessTokenClaims {
  iss: string;
  sub: string;
  aud: string | string[];
  exp: number;
  iat: number;
  jti: string;
  roles: Role[];
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
  verify(token: string): Promise<AccessTokenClaims>;
}

const HMAC_ALGORITHMS = ['HS256'];
const ASYMMETRIC_ALGORITHMS = ['EdDSA', 'Ed25519', 'ES256', 'RS256'];

function claimsOf(payload: JWTPayload): AccessTokenClaims {
  const roles = (payload as { roles?: unknown }).roles;
  if (!Array.isArray(roles) || !roles.every((r) => (ROLES as readonly string[]).includes(r as string))) {
    throw errors.unauthorized('access token carries no valid roles claim', 'INVALID_TOKEN');
  }
  if (typeof payload.sub !== 'string' || payload.sub === '' || typeof payload.jti !== 'string') {
    throw errors.unauthorized('access token lacks sub or jti', 'INVALID_TOKEN');
  }
  return {
    iss: payload.iss as string,
    sub: payload.sub,
    aud: payload.aud as string | string[],
    exp: payload.exp as number,
    iat: payload.iat as number,
    jti: payload.jti,
    roles: roles as Role[],
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
  const verifyOptions = {
    issuer: opts.issuer,
    audience: opts.audience,
    algorithms,
    clockTolerance: opts.clockToleranceSeconds ?? 5,
    requiredClaims: ['iss', 'sub', 'aud', 'exp', 'iat', 'jti'],
  };
  const cacheSize = opts.cacheSize ?? 10_000;
  const cache = new Map<string, AccessTokenClaims>();

  return {
    async verify(token: string): Promise<AccessTokenClaims> {
      const now = Date.now() / 1000;
      const hit = cache.get(token);
      if (hit) {
        if (hit.exp > now) return hit;
        cache.delete(token);
      }
      let claims: AccessTokenClaims;
      try {
        const { payload } =
          typeof key === 'function'
            ? await jwtVerify(token, key, verifyOptions)
            : await jwtVerify(token, key, verifyOptions);
        claims = claimsOf(payload);
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
