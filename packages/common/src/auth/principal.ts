/**
 * Who is calling: the verified identity behind a request, as domain code sees
 * it. Domain rules take a `Principal` and decide ownership with `mayActFor`,
 * so a rule holds whichever way it is reached (HTTP, NATS, a background job).
 */

import type { Role } from './roles.ts';
import { isScope, type Scope } from './scopes.ts';
import type { AccessTokenClaims } from './token-verifier.ts';

export interface Principal {
  /** The token's `sub`: a user ID, or a machine client's ID. */
  readonly subject: string;
  readonly kind: 'user' | 'client';
  readonly roles: readonly Role[];
  /** The user a caller acts for: the user itself, a daemon's provider owner, none for other machine clients. */
  readonly actsFor?: string;
  /** The machine client's ID (client-credentials tokens). */
  readonly clientId?: string;
  /** The token's `jti`. */
  readonly tokenId: string;
  /** An API key's token: what it may do (scopes.ts); absent for a user's own sign-in and for machine clients. */
  readonly scopes?: readonly Scope[];
  /** The API key's ID, for such a token. */
  readonly keyId?: string;
  /** A user's sign-in token: the sign-in (refresh-token family) it came from. */
  readonly sessionId?: string;
  /** A user whose e-mail address is verified (the token's `email_verified`). */
  readonly emailVerified?: boolean;
  /** True only for the stand-in principal of a setup with access control switched off. */
  readonly unchecked?: boolean;
}

/** The principal of a verified token. */
export function principalOf(claims: AccessTokenClaims): Principal {
  if (claims.client_id) {
    return {
      subject: claims.sub,
      kind: 'client',
      roles: claims.roles,
      clientId: claims.client_id,
      actsFor: claims.owner_id,
      tokenId: claims.jti,
    };
  }
  return {
    subject: claims.sub,
    kind: 'user',
    roles: claims.roles,
    actsFor: claims.sub,
    tokenId: claims.jti,
    ...(claims.scope !== undefined ? { scopes: claims.scope.split(' ').filter(isScope), keyId: claims.key_id } : {}),
    ...(claims.sid !== undefined ? { sessionId: claims.sid } : {}),
    ...(claims.email_verified === true ? { emailVerified: true } : {}),
  };
}

/**
 * Every request's principal when access control is switched off (`access.enabled: false`, an isolated
 * development setup): an admin and a platform service at once, so no rule refuses it.
 */
export const UNCHECKED_PRINCIPAL: Principal = Object.freeze({
  subject: '00000000-0000-0000-0000-000000000000',
  kind: 'user' as const,
  roles: ['admin', 'service'] as Role[],
  tokenId: 'access-control-off',
  unchecked: true,
});

export const hasRole = (p: Principal, ...roles: Role[]) => p.roles.some((r) => roles.includes(r));

/** Admins and platform services may act on any owner's resources. */
export const isPrivileged = (p: Principal) => hasRole(p, 'admin', 'service');

/** Whether the caller may act on a resource owned by the user `ownerId`: its owner (or their daemon), or privileged. */
export function mayActFor(p: Principal, ownerId: string): boolean {
  return isPrivileged(p) || (p.actsFor !== undefined && p.actsFor === ownerId);
}
