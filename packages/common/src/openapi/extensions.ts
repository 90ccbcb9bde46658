/**
 * The platform's OpenAPI schema extensions: rules a field's validation enforces that JSON Schema cannot state (it
 * counts characters, never bytes, and knows no durations), written into the document beside the field's standard
 * keywords by the same zod schema that checks them, so the two cannot drift apart. A reader (or a generated client, or
 * `requestSchemaDrift` in the tests) applies each as its check here says.
 *
 * - `x-max-utf8-bytes: N`: the text is at most N bytes of UTF-8 (`maxLength` bounds its characters);
 * - `x-max-segment-utf8-bytes: N`: each `/`-separated segment of the text is at most N bytes of UTF-8;
 * - `x-min-duration: "1s"`, `x-max-duration: "7d"`: the duration the text names (`pattern` says how it is written)
 *   lies within the bound, inclusive;
 * - `x-max-decimals: N`: a decimal string has at most N digits after its point (an amount: the token's decimals).
 *
 * A service may state a rule of its own the same way (billing's `x-base58-bytes`: base58 text of exactly N bytes),
 * with its check beside the schema that states it.
 */
import type { z } from 'zod';
import { durationMs, parseDuration } from '../duration.ts';

const bytes = (s: string) => Buffer.byteLength(s, 'utf8');

/** Each extension's check of a value against the extension's value. */
export const SCHEMA_EXTENSIONS = {
  'x-max-utf8-bytes': (value: string, max: number) => bytes(value) <= max,
  'x-max-segment-utf8-bytes': (value: string, max: number) => value.split('/').every((s) => bytes(s) <= max),
  'x-min-duration': (value: string, min: string) => (parseDuration(value) ?? Infinity) >= durationMs(min),
  'x-max-duration': (value: string, max: string) => (parseDuration(value) ?? 0) <= durationMs(max),
  'x-max-decimals': (value: string, max: number) => (value.split('.')[1]?.length ?? 0) <= max,
} as const;

/** `schema`, also at most `max` bytes of UTF-8, checked and documented (`x-max-utf8-bytes`). */
export function maxUtf8Bytes<T extends z.ZodType<string>>(schema: T, max: number): T {
  return schema
    .refine((s) => SCHEMA_EXTENSIONS['x-max-utf8-bytes'](s, max), `must be at most ${max} bytes of UTF-8`)
    .meta({ 'x-max-utf8-bytes': max }) as T;
}

/** `schema`, each `/`-separated segment at most `max` bytes of UTF-8, checked and documented. */
export function maxSegmentUtf8Bytes<T extends z.ZodType<string>>(schema: T, max: number, message?: string): T {
  return schema
    .refine(
      (s) => SCHEMA_EXTENSIONS['x-max-segment-utf8-bytes'](s, max),
      message ?? `each "/"-separated segment must be at most ${max} bytes of UTF-8`,
    )
    .meta({ 'x-max-segment-utf8-bytes': max }) as T;
}

/**
 * `schema` (a duration, `zDuration`) naming a duration from `min` to `max` inclusive, checked and documented
 * (`x-min-duration`, `x-max-duration`).
 */
export function durationWithin<T extends z.ZodType<string>>(schema: T, min: string, max: string, message?: string): T {
  return schema
    .refine((s) => {
      const ms = parseDuration(s);
      return ms === undefined || (ms >= durationMs(min) && ms <= durationMs(max));
    }, message ?? `must be from ${min} to ${max}`)
    .meta({ 'x-min-duration': min, 'x-max-duration': max }) as T;
}
