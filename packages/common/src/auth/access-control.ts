/**
 * Access control for every route of every service, on by default. Each
 * request to a route that is not public is authenticated in `onRequest`,
 * before its body is read or validated: an anonymous or forged request gets
 * 401 (`WWW-Authenticate: Bearer`), never a 400 describing the schema. A route
 * states its rule in its config:
 *
 *   app.post('/register', { config: { public: true } }, ...)       // no token needed
 *   app.get('/providers', { config: { roles: ['scheduler', 'admin'] } }, ...)  // one of these roles
 *   app.get('/wallet/:id', ...)                                    // any valid token; ownership in the domain
 *   app.get('/offers', { config: { scope: 'offers' } }, ...)         // an API key with `offers` (or `read`) too
 *
 * and domain code decides ownership with the request's `principal`. The
 * health route, `/metrics`, `/docs*` and `/redoc*` are always public.
 * Switching access control off (`access.enabled: false`) is for an isolated
 * development setup only: every request then acts as an unchecked admin.
 */
import type { FastifyInstance, FastifyRequest, RouteOptions } from 'fastify';
import fp from 'fastify-plugin';
import { AppError, errors } from '../errors.ts';
import { hasRole, type Principal, principalOf, UNCHECKED_PRINCIPAL } from './principal.ts';
import type { Role } from './roles.ts';
import { type Scope, scopeAllows } from './scopes.ts';
import type { AccessTokenClaims, TokenVerifier } from './token-verifier.ts';
import { assertVerifiedEmail, type VerifiedEmailAction } from './verified-email.ts';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** No token is needed (registration, login, the JWKS, public price lists). */
    public?: boolean;
    /** A token holding one of these roles is needed; any valid token when absent. */
    roles?: readonly Role[];
    /** The scope that lets an API key's token call the route, or any of several (scopes.ts); absent: no API key may. */
    scope?: Scope | readonly Scope[];
    /**
     * The action the route is (verified-email.ts): a user calls it only with a verified e-mail address when the
     * service's `access.require_verified_email` names it.
     */
    verifiedEmail?: VerifiedEmailAction;
  }
  interface FastifyInstance {
    /** The verifier of this app's access tokens; null when access control is off. */
    tokenVerifier: TokenVerifier | null;
  }
  interface FastifyRequest {
    /** The verified caller; set before the body is read. Null on public routes. */
    principal: Principal | null;
  }
}

const BEARER = /^Bearer[ \t]+([A-Za-z0-9\-._~+/]+=*)[ \t]*$/i;

/** The token of an `Authorization: Bearer <token>` header, or undefined. */
export function bearerTokenOf(request: FastifyRequest): string | undefined {
  const header = request.headers.authorization;
  if (typeof header !== 'string') return undefined;
  return BEARER.exec(header)?.[1];
}

/** Verifies a bearer token as this app's verifier does (for callers outside a route, and tests). */
export async function verifyBearer(
  verifier: TokenVerifier,
  header: string | undefined,
  at?: Date,
): Promise<AccessTokenClaims> {
  const token = header === undefined ? undefined : BEARER.exec(header)?.[1];
  if (!token) {
    throw errors.unauthorized(
      header === undefined ? 'missing bearer token' : 'malformed Authorization header',
      'MISSING_TOKEN',
    );
  }
  return verifier.verify(token, at);
}

/** The request's principal, authenticating it first where no hook did (a route outside the global rule). */
export async function authenticate(request: FastifyRequest): Promise<Principal> {
  if (request.principal) return request.principal;
  const verifier = request.server.tokenVerifier;
  request.principal = verifier
    ? principalOf(await verifyBearer(verifier, request.headers.authorization))
    : UNCHECKED_PRINCIPAL;
  return request.principal;
}

/** 403 INSUFFICIENT_SCOPE: an API key without `scope` (none: the action takes no API key at all). */
function insufficientScope(scope: Scope | readonly Scope[] | undefined): AppError {
  const named = typeof scope === 'string' ? scope : scope?.join(' or ');
  return new AppError(
    'forbidden',
    'INSUFFICIENT_SCOPE',
    named === undefined
      ? 'this action takes no API key: sign in as the user'
      : `this action needs an API key with the scope ${named}`,
    named === undefined ? {} : { extra: { required_scope: named } },
  );
}

/**
 * For a route whose scope depends on its request (a presigned URL's method): refuses an API key's caller that lacks
 * `scope` (403 INSUFFICIENT_SCOPE); a user's sign-in and machine clients pass.
 */
export function assertScope(principal: Principal, scope: Scope): void {
  if (principal.scopes && !principal.scopes.includes(scope)) throw insufficientScope(scope);
}

/** The caller of a route that requires a token (throws 401 where none was verified, e.g. on a public route). */
export function callerOf(request: FastifyRequest): Principal {
  if (!request.principal) throw errors.unauthorized('this action needs a bearer token', 'MISSING_TOKEN');
  return request.principal;
}

export interface AccessControlOptions {
  /** Null switches access control off (an isolated development setup only). */
  verifier: TokenVerifier | null;
  /** Paths of routes that are always public (health, metrics, docs). */
  publicPaths: (url: string) => boolean;
  /** The actions a user calls only with a verified e-mail address (`access.require_verified_email`). */
  requireVerifiedEmail: readonly VerifiedEmailAction[];
}

/** Whether a route is reachable without a token. */
export const isPublicRoute = (route: Pick<RouteOptions, 'url' | 'config'>, publicPaths: (url: string) => boolean) =>
  (route.config as { public?: boolean } | undefined)?.public === true || publicPaths(route.url);

/** Installs the rule on every route of the app (and of every plugin registered after it). */
export const accessControl = fp(
  async (app: FastifyInstance, opts: AccessControlOptions) => {
    app.decorate('tokenVerifier', opts.verifier);
    app.decorateRequest('principal', null);
    app.addHook('onRequest', async (request) => {
      const url = request.routeOptions.url;
      // No route matched (the 404 answer reveals nothing a token would protect), or a CORS preflight, which
      // browsers send without credentials.
      if (url === undefined || request.method === 'OPTIONS') return;
      const config = request.routeOptions.config;
      if (config.public === true || opts.publicPaths(url)) return;
      const principal = await authenticate(request);
      // An API key calls only the routes its scopes open, whatever its roles: a key that lacks the scope hears so
      // (403 INSUFFICIENT_SCOPE) on every route, role-gated ones included, before its roles are looked at.
      if (principal.scopes && !scopeAllows(principal.scopes, config.scope, request.method)) {
        throw insufficientScope(config.scope);
      }
      if (config.roles && !principal.unchecked && !hasRole(principal, ...config.roles)) {
        throw errors.forbidden(`this action requires the role ${config.roles.join(' or ')}`, 'ROLE_REQUIRED');
      }
      if (config.verifiedEmail && opts.requireVerifiedEmail.includes(config.verifiedEmail)) {
        assertVerifiedEmail(principal, config.verifiedEmail);
      }
    });
  },
  { name: 'access-control' },
);
