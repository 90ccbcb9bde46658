/**
 * Durations written the Go way ("30s", "15m", "1h30m", "500ms") or with
 * words ("15 minutes"), parsed by the `parse-duration` library. A bare number
 * is not accepted: a unit must always be named.
 *
 * What is a duration is one regular expression, `DURATION_PATTERN`: numbers, each followed by a unit
 * `parse-duration` knows (any case, a plural `s` allowed), spaces between them allowed. The schemas check it and the
 * OpenAPI documents state it as the field's `pattern`.
 */
import parse from 'parse-duration';
import { z } from 'zod';

/** The units `parse-duration` reads (its English table), each also with a plural `s`. */
const UNITS = [
  'millisecond',
  'microsecond',
  'nanosecond',
  'millisec',
  'microsec',
  'nanosec',
  'minute',
  'second',
  'month',
  'hour',
  'week',
  'year',
  'day',
  'min',
  'sec',
  'mth',
  'yr',
  'mo',
  'wk',
  'hr',
  'ms',
  'us',
  'µs',
  'ns',
  'y',
  'w',
  'd',
  'h',
  'm',
  's',
];

/** A letter in either case where `parse-duration` (which lowercases a unit) reads both. */
const eitherCase = (unit: string) =>
  [...unit]
    .map((c) => {
      const upper = c.toUpperCase();
      return upper !== c && upper.toLowerCase() === c ? `[${c}${upper}]` : c;
    })
    .join('');

/** A duration's text: `<number><unit>` one or more times, spaces around each allowed (`1h30m`, `15 minutes`). */
export const DURATION_PATTERN = new RegExp(`^ *(?:\\d+(?:\\.\\d+)? *(?:${UNITS.map(eitherCase).join('|')})[sS]? *)+$`);

/** Milliseconds for a duration string, or `undefined` when it is not one. */
export function parseDuration(input: string): number | undefined {
  if (input.length > 64 || !DURATION_PATTERN.test(input)) return undefined;
  const ms = parse(input);
  if (ms === null || ms === undefined || !Number.isFinite(ms) || ms < 0) return undefined;
  return ms;
}

/** Milliseconds for a duration already validated by `zDuration`. */
export function durationMs(input: string): number {
  const ms = parseDuration(input);
  if (ms === undefined) throw new Error(`invalid duration ${JSON.stringify(input)}`);
  return ms;
}

/** Zod schema for a duration string such as "30s" or "1h30m" (`DURATION_PATTERN`, at most 64 characters). */
export const zDuration = () =>
  z
    .string()
    .max(64)
    .regex(DURATION_PATTERN, 'expected a duration such as "30s", "15m" or "1h30m"')
    .refine((s) => parseDuration(s) !== undefined, {
      message: 'expected a duration such as "30s", "15m" or "1h30m"',
      // Only what the pattern took: its own message says the rest, once.
      when: (payload) => (payload.issues ?? []).length === 0,
    });

/**
 * A duration of at least `min` (`0s` for an interval would run as fast as the CPU goes; for a timeout it would turn
 * the timeout off).
 */
export const zDurationAtLeast = (min: string) =>
  zDuration().refine((s) => durationMs(s) >= durationMs(min), { message: `at least ${min}` });
