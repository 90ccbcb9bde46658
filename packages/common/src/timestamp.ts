/**
 * Timestamps the platform takes from a caller (a request body, a query parameter, a message): RFC 3339 with `Z` or an
 * offset, within a range every layer holds the same way. RFC 3339 and JavaScript accept year 0, PostgreSQL has no
 * year 0 (the year before 1 AD is its 1 BC), so a year-0 date that reached SQL was a 500 ("date/time field value out of
 * range"); and a date far in the future, taken as "the newest", outranks every true one after it. One schema bounds
 * them all: a date-time written with a year from 1970 to 2099 (`TIMESTAMP_PATTERN`, which the OpenAPI documents state
 * as the field's `pattern`: an offset moves the instant by less than a day, which every layer holds); anything else is
 * a 400 naming its field.
 */
import { z } from 'zod';

/** The earliest instant a caller may send, as written (inclusive): the Unix epoch's date. */
export const EARLIEST_TIMESTAMP = '1970-01-01T00:00:00Z';
/** The first date a caller may not write: the year 2100 (nothing the platform records is dated that late). */
export const TIMESTAMP_LIMIT = '2100-01-01T00:00:00Z';

/** The written year of a timestamp a caller sends: 1970 to 2099. */
export const TIMESTAMP_PATTERN = /^(?:19[7-9]\d|20\d\d)-/;

/** Whether an RFC 3339 string is a date-time written with a year from 1970 to 2099. */
export function isTimestampInRange(value: string): boolean {
  return Number.isFinite(Date.parse(value)) && TIMESTAMP_PATTERN.test(value);
}

const RANGE_MESSAGE = `must be an RFC 3339 date-time written with a year from ${EARLIEST_TIMESTAMP.slice(0, 4)} to 2099`;

/**
 * Zod schema of a timestamp a caller sends: an RFC 3339 date-time (`2026-03-01T10:00:00Z`, `…+02:00`, fractions of
 * a second allowed) written with a year from 1970 to 2099. The value stays a string; `new Date(value)` is exact to the
 * millisecond.
 */
export const zTimestamp = () =>
  z.iso
    .datetime({ offset: true })
    // `2026-03-01T10:00:00.123456789+02:00` is 35 characters; the format alone would take any number of decimals.
    .max(64)
    .refine((value) => TIMESTAMP_PATTERN.test(value), {
      message: RANGE_MESSAGE,
      // Not a date-time at all: the format's own message says so, once.
      when: (payload) => (payload.issues ?? []).length === 0,
    })
    // The year's rule in the document, beside the format's own pattern.
    .meta({ allOf: [{ pattern: TIMESTAMP_PATTERN.source }] })
    .describe(`RFC 3339 date-time, written with a year from ${EARLIEST_TIMESTAMP.slice(0, 4)} to 2099`);
