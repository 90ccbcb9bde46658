/**
 * Who may do what, when JWT enforcement is on (`auth.enabled`; off by
 * default, as the spec's endpoints are open). Providers register their own
 * machines (`owner_id` = token `sub`), and update, heartbeat, delete and read
 * only those; admins (the scheduler's service identity included) read and
 * change every provider. Renters may not use the registry.
 */
import { type AccessTokenClaims, authenticate, errors } from '@gpu/common';
import type { FastifyRequest } from 'fastify';

export interface Access {
  /** Whether tokens are checked at all. */
  readonly enabled: boolean;
  /** Authenticates the caller; undefined when enforcement is off. 401/403 when the caller may not use the registry. */
  caller(request: FastifyRequest): Promise<AccessTokenClaims | undefined>;
}

/** The owner a caller is limited to, or undefined for unrestricted callers (admin, or enforcement off). */
export function ownerScope(claims: AccessTokenClaims | undefined): string | undefined {
  if (!claims || claims.roles.includes('admin')) return undefined;
  return claims.sub;
}

/** Throws 403 unless the caller may act for `ownerId`. */
export function assertActsFor(claims: AccessTokenClaims | undefined, ownerId: string): void {
  const scope = ownerScope(claims);
  if (scope !== undefined && scope !== ownerId) {
    throw errors.forbidden('providers may only manage their own machines', 'NOT_PROVIDER_OWNER');
  }
}

export const openAccess: Access = { enabled: false, caller: async () => undefined };

/** Enforcing access: a valid token with the `provider` or `admin` role. */
export const enforcedAccess: Access = {
  enabled: true,
  async caller(request) {
    const claims = await authenticate(request);
    if (!claims.roles.some((r) => r === 'provider' || r === 'admin')) {
      throw errors.forbidden('the provider registry requires the role provider or admin', 'ROLE_REQUIRED');
    }
    return claims;
  },
};
