/**
 * The signing algorithms and the shortest HS256 secret, on their own (no imports): the configuration schema uses
 * them, and so does `pnpm start` (scripts/lib/auth-mode.ts), which checks the auth settings before it starts anything.
 */

/** Signing algorithms: HS256 with the shared secret, or an asymmetric key pair published as a JWKS. */
export const ALGORITHMS = ['HS256', 'EdDSA', 'ES256', 'RS256'] as const;
export type Algorithm = (typeof ALGORITHMS)[number];

/** Shortest HS256 secret accepted in production: 256 bits, as RFC 7518 asks for HS256 keys. */
export const MIN_SECRET_LENGTH = 32;
