/**
 * Durations written the Go way ("30s", "15m", "1h30m", "500ms") or with
 * words ("15 minutes"), parsed by the `parse-duration` library. A bare number
 * is not accepted: a unit must always be named.
 */
import parse from 'parse-duration';
import { z } from 'zod';

const SHAPE = /^\s*(\d+(\.\d+)?\s*[a-zµμ]+\s*)+$/i;

/** Milliseconds for a duration string, or `undefined` when it is not one. */
export function parseDuration(input: string): number | undefined {
  if (!SHAPE.test(input)) return undefined;
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

/** Zod schema for a duration string such as "30s" or "1h30m". */
export const zDuration = () =>
  z
    .string()
    .max(64)
    .refine((s) => parseDuration(s) !== undefined, {
      message: 'expected a duration such as "30s", "15m" or "1h30m"',
    });
