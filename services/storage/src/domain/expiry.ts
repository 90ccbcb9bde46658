/**
 * Presigned URL lifetimes: a duration, at least 1 second. A URL asked for by its caller (`POST /presigned-url`) lasts
 * 15 minutes by default and 7 days at most; a grant for a user's workload (`POST /grants`, handed to a provider's
 * machine) 10 minutes by default and 1 hour at most. The routes' schemas check a requested lifetime against its rule
 * (and the documents state it: `x-min-duration`, `x-max-duration`).
 */
import { durationMs } from '@gpu/common';

/** A kind of URL's default lifetime and upper bound. */
export interface ExpiryRule {
  /** The lifetime when none is asked for. */
  fallback: string;
  /** The longest, as a duration. */
  max: string;
  /** The bound in words, for the refusal. */
  maxWords: string;
}

/** The shortest lifetime of any URL. */
export const MIN_EXPIRY = '1s';

export const PRESIGN_EXPIRY: ExpiryRule = { fallback: '15m', max: '7d', maxWords: '7 days' };
export const GRANT_EXPIRY: ExpiryRule = { fallback: '10m', max: '1h', maxWords: '1 hour' };

/** Whole seconds of a URL's lifetime: the requested one (already within its rule), else the rule's default. */
export function expirySeconds(expiry: string | undefined, rule: ExpiryRule): number {
  return Math.floor(durationMs(expiry ?? rule.fallback) / 1000);
}
