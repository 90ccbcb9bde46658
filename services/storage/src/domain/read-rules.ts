/**
 * Which of a read's conditions are passed on to the store (RFC 9110):
 * - one byte range (`bytes=a-b`, `bytes=a-`, `bytes=-n`) is served as a part; any other Range is ignored and the
 *   whole object sent: a multi-range (RFC 9110 allows answering it whole) and an invalid one such as `bytes=3-1`,
 *   whose last position is below its first (RFC 9110 says an invalid range set is ignored);
 * - `If-None-Match` wins over `If-Modified-Since`, and an invalid date is ignored.
 */
import type { ReadConditions } from './store.ts';

/** A read's request headers, as sent. */
export interface ReadHeaders {
  range?: string;
  ifNoneMatch?: string;
  ifModifiedSince?: string;
}

const SINGLE_RANGE = /^bytes=(?:(\d+)-(\d*)|-\d+)$/;

/** The Range to pass on: one byte range only. */
function singleRange(header: string | undefined): string | undefined {
  const range = header?.trim();
  const match = range ? SINGLE_RANGE.exec(range) : null;
  if (!match) return undefined;
  const [, first, last] = match;
  if (first !== undefined && last && BigInt(last) < BigInt(first)) return undefined;
  return range;
}

/** The conditions a read passes on to the store. */
export function readConditions(h: ReadHeaders): ReadConditions {
  const since = h.ifModifiedSince ? new Date(h.ifModifiedSince) : undefined;
  return {
    range: singleRange(h.range),
    ifNoneMatch: h.ifNoneMatch || undefined,
    ifModifiedSince: since && !Number.isNaN(since.getTime()) && !h.ifNoneMatch ? since : undefined,
  };
}
