/**
 * Presigned URL lifetimes: a duration string, at least 1 second. A URL asked for by its caller (`POST
 * /presigned-url`) lasts 15 minutes by default and 7 days at most; a grant for a user's workload (`POST /grants`,
 * handed to a provider's machine) 10 minutes by default and 1 hour at most.
 */
import { parseDuration } from '@gpu/common';

/** A kind of URL's default lifetime and upper bound. */
export interface ExpiryRule {
  /** The lifetime when none is asked for. */
  fallback: string;
  maxSeconds: number;
  /** The bound in words, for the refusal. */
  maxWords: string;
}

export const PRESIGN_EXPIRY: ExpiryRule = { fallback: '15m', maxSeconds: 7 * 24 * 3600, maxWords: '7 days' };
export const GRANT_EXPIRY: ExpiryRule = { fallback: '10m', maxSeconds: 3600, maxWords: '1 hour' };

/** Seconds for an expiry string, or a reason it is not acceptable. */
export function expirySeconds(expiry: string | undefined, rule: ExpiryRule): { seconds: number } | { problem: string } {
  const ms = parseDuration(expiry ?? rule.fallback);
  if (ms === undefined) return { problem: 'expected a duration such as "30s", "15m" or "1h30m"' };
  const seconds = Math.floor(ms / 1000);
  if (seconds < 1) return { problem: 'must be at least 1 second' };
  if (seconds > rule.maxSeconds) return { problem: `must be at most ${rule.maxWords}` };
  return { seconds };
}
