/**
 * Timestamps the platform takes from a caller (a request body, a query parameter, a message): RFC 3339 with `Z` or an
 * offset, within a range every layer holds the same way. RFC 3339 and JavaScript accept year 0, PostgreSQL has no
 * year 0 (the year before 1 AD is its 1 BC), so a year-0 date that reached SQL was a 500 ("date/time field value out of
 * range"); and a date far in the future, taken as "the newest", outranks every true one after it. One schema bounds
 * them all: a value outside [`EARLIEST_TIMESTAMP`, `TIMESTAMP_LIMIT`) is a 400 naming its field.
 */
import { z } from 'zod';

/** The earliest instant a caller may send (inclusive): the Unix epoch. */
export const EARLIEST_TIMESTAMP = '1970-01-01T00:00:00Z';
/** The first instant a caller may not send: the year 2100 (nothing the platform records is dated that late). */
export const TIMESTAMP_LIMIT = '2100-01-01T00:00:00Z';

const EARLIEST_MS = Date.parse(EARLIEST_TIMESTAMP);
const LIMIT_MS = Date.parse(TIMESTAMP_LIMIT);

/** Whether an RFC 3339 string names an instant in [`EARLIEST_TIMESTAMP`, `TIMESTAMP_LIMIT`). */
export function isTimestampInRange(value: string): boolean {
  const ms = Date.parse(value);
  return Number.isFinite(ms) && ms >= EARLIEST_MS && ms < LIMIT_MS;
}

/**
 * Zod schema of a timestamp a caller sends: an RFC 3339 date-time (`2026-03-01T10:00:00Z`, `…+02:00`, fractions of
 * a second allowed) from 1970 up to (not including) 2100. The value stays a string; `new Date(value)` is exact to the
 * millisecond.
 */
export const zTimestamp = () =>
  z.iso
    .datetime({ offset: true })
    // `2026-03-01T10:00:00.123456789+02:00` is 35 characters; the format alone would take any number of decimals.
    .max(64)
    .refine(isTimestampInRange, {
      message: `must be an RFC 3339 date-time from ${EARLIEST_TIMESTAMP} up to (not including) ${TIMESTAMP_LIMIT}`,
      // Not a date-time at all: the format's own message says so, once.
      when: (payload) => (payload.issues ?? []).length === 0,
    })
    .describe(`RFC 3339 date-time, ${EARLIEST_TIMESTAMP.slice(0, 4)} to ${TIMESTAMP_LIMIT.slice(0, 4)} (exclusive)`);
