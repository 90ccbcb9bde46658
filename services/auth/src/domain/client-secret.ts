/**
 * Client secrets: 256 random bits, shown once, stored only as SHA-256. A
 * secret of that strength needs no slow hash (nothing to guess); the
 * comparison is constant-time.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

/** Secrets start with this, so secret scanners and people can tell one at a glance. */
const SECRET_PREFIX = 'gpcs_';

export function generateSecret(): string {
  return `${SECRET_PREFIX}${randomBytes(32).toString('base64url')}`;
}

export function hashSecret(secret: string): string {
  return createHash('sha256').update(secret).digest('hex');
}

/** Whether `secret` hashes to `hash` (constant-time). */
export function secretMatches(secret: string, hash: string | null): boolean {
  if (!hash) return false;
  const a = Buffer.from(hashSecret(secret), 'hex');
  const b = Buffer.from(hash, 'hex');
  return a.length === b.length && timingSafeEqual(a, b);
}
