/**
 * Bearer-token authentication for Fastify routes:
 *
 *   await app.register(bearerAuth, { verifier: createTokenVerifier({ ... }) });
 *   app.get('/me', { onRequest: requireAuth }, (request) => request.auth!.sub);
 *   app.put('/admin', { onRequest: requireRole('admin') }, ...);
 *
 * A missing or invalid token is a 401 with `WWW-Authenticate: Bearer`; a
 * valid token without an allowed role is a 403.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { errors } from '../errors.ts';
import type { AccessTokenClaims, Role, TokenVerifier } from './token-verifier.ts';

declare module 'fastify' {
  interface FastifyInstance {
    /** The verifier registered by `bearerAuth`. */
    tokenVerifier: TokenVerifier;
  }
  interface FastifyRequest {
    /** The verified access token's claims, once `requireAuth`/`requireRole` ran. */
    auth: AccessTokenClaims | null;
  }
}

const BEARER = /^Bearer[ \t]+([A-Za-z0-9\-._~+/]+=*)[ \t]*$/i;

/** The token of an `Authorization: Bearer <token>` header, or undefined. */
export function bearerTokenOf(request: FastifyRequest): string | undefined {
  const header = request.headers.authorization;
  if (typeof header !== 'string') return undefined;
  return BEARER.exec(header)?.[1];
}

/** Verifies the request's bearer token (once per request) and returns its claims. */
export async function authenticate(request: FastifyRequest): Promise<AccessTokenClaims> {
  if (request.auth) return request.auth;
  const token = bearerTokenOf(request);
  if (!token) {
    throw errors.unauthorized(
      request.headers.authorization === undefined ? 'missing bearer token' : 'malformed Authorization header',
      'MISSING_TOKEN',
    );
  }
  request.auth = await request.server.tokenVerifier.verify(token);
  return request.auth;
}

/** Route hook: the request must carry a valid access token. */
export async function requireAuth(request: FastifyRequest): Promise<void> {
  await authenticate(request);
}

/** Route hook: the request must carry a valid access token holding at least one of `roles`. */
export function requireRole(...roles: Role[]): (request: FastifyRequest) => Promise<void> {
  if (roles.length === 0) throw new Error('requireRole needs at least one role');
  return async (request) => {
    const claims = await authenticate(request);
    if (!claims.roles.some((r) => roles.includes(r))) {
      throw errors.forbidden(`this action requires the role ${roles.join(' or ')}`, 'ROLE_REQUIRED');
    }
  };
}

/** Registers the verifier and the `request.auth` decorator on the app (and its children). */
export const bearerAuth = fp(
  async (app: FastifyInstance, opts: { verifier: TokenVerifier }) => {
    app.decorate('tokenVerifier', opts.verifier);
    app.decorateRequest('auth', null);
  },
  { name: 'bearer-auth' },
);
