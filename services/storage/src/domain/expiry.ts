/** Presigned URL lifetimes: a duration string, 15 minutes by default, 1 second to 7 days. */
import { parseDuration } from '@gpu/common';

export const DEFAULT_EXPIRY = '15m';
const MAX_EXPIRY_SECONDS = 7 * 24 * 3600;

/** Seconds for an expiry string, or a reason it is not acceptable. */
export function expirySeconds(expiry: string | undefined): { seconds: number } | { problem: string } {
  const ms = parseDuration(expiry ?? DEFAULT_EXPIRY);
  if (ms === undefined) return { problem: 'expected a duration such as "30s", "15m" or "1h30m"' };
  const seconds = Math.floor(ms / 1000);
  if (seconds < 1) return { problem: 'must be at least 1 second' };
  if (seconds > MAX_EXPIRY_SECONDS) return { problem: 'must be at most 7 days' };
  return { seconds };
}
