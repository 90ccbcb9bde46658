/**
 * The values `requestSchemaDrift` sends: generated from a field's JSON Schema in a service's document (its bounds and
 * their neighbours, samples of its pattern, its enum and examples, awkward text), the smallest value the document
 * accepts for a schema, and a parameter's text read as its schema's type.
 */
import randexp from 'randexp';

// randexp is CommonJS whose module.exports is the class (its types name it `default`).
const RandExp = randexp as unknown as typeof randexp.default;

export type Json = Record<string, unknown>;
export type Schema = Json & {
  $ref?: string;
  type?: string | string[];
  properties?: Record<string, Schema>;
  items?: Schema;
  anyOf?: Schema[];
  oneOf?: Schema[];
  allOf?: Schema[];
  enum?: unknown[];
  pattern?: string;
  minLength?: number;
  maxLength?: number;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  exclusiveMaximum?: number;
  minItems?: number;
  maxItems?: number;
  examples?: unknown[];
  default?: unknown;
  format?: string;
};

/** Values that trip rules which a schema may not state: chosen for the rules the platform has. */
const AWKWARD_STRINGS = [
  '',
  ' ',
  'a',
  'A',
  'aa',
  'abc',
  '0',
  '1',
  '-1',
  '1.5',
  '0.000001',
  '00',
  '1e2',
  'a b',
  ' a',
  'a\u0000b',
  '\u0000',
  'a\u0001b',
  'a\u007fb',
  'a\u0085b',
  'a\nb',
  'café',
  'ŝ',
  '日本',
  '😀',
  '.',
  '..',
  'a..b',
  './a',
  'a/./b',
  'a/../b',
  '/a',
  'a/',
  'a//b',
  '192.168.0.1',
  'xn--abc',
  'abc-s3alias',
  'true',
  'null',
  '1970-01-01T00:00:00Z',
  '1969-12-31T23:59:59Z',
  '2099-12-31T23:59:59Z',
  '2100-01-01T00:00:00Z',
  '0000-01-01T00:00:00Z',
  '9999-12-31T23:59:59Z',
  '1970-01-01T00:30:00+01:00',
  '2099-12-31T23:30:00-01:00',
  '2026-02-30T00:00:00Z',
  '2026-03-01',
  '0s',
  '1s',
  '500ms',
  '15m',
  '1h30m',
  '7d',
  '8d',
  '1 hour',
  '15 minutes',
  '10',
  '1.2.3',
  '535.104',
  '.1',
  '1.',
  '1..2',
  '11111111111111111111111111111111',
  'gpk_0000',
  'x'.repeat(64),
  'x'.repeat(65),
  'x'.repeat(256),
];

/** A small, seeded generator (mulberry32): the same samples every run. */
export function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export const isObject = (v: unknown): v is Json => v !== null && typeof v === 'object' && !Array.isArray(v);

/** The field's schema with every `$ref` into the document replaced by what it names. */
export function inline(doc: Json, schema: unknown, depth = 0): Schema {
  if (Array.isArray(schema)) return schema.map((s) => inline(doc, s, depth)) as unknown as Schema;
  if (!isObject(schema) || depth > 24) return schema as Schema;
  if (typeof schema.$ref === 'string') {
    let target: unknown = doc;
    for (const part of schema.$ref.replace(/^#\//, '').split('/')) target = (target as Json)[part];
    const { $ref: _, ...rest } = schema;
    return inline(doc, { ...(target as Json), ...rest }, depth + 1);
  }
  return Object.fromEntries(Object.entries(schema).map(([k, v]) => [k, inline(doc, v, depth + 1)])) as Schema;
}

export const typesOf = (s: Schema): string[] => (Array.isArray(s.type) ? s.type : s.type ? [s.type] : []);

/** The patterns a string schema asserts (its own and its `allOf`'s). */
const patternsOf = (s: Schema): string[] => [
  ...(s.pattern ? [s.pattern] : []),
  ...(s.allOf ?? []).flatMap((p) => patternsOf(p)),
];

/** Candidate values for a schema: valid-looking ones first, then its edges and the awkward ones. */
export function candidates(s: Schema, random: () => number): unknown[] {
  const out: unknown[] = [];
  for (const branch of [...(s.anyOf ?? []), ...(s.oneOf ?? [])]) out.push(...candidates(branch, random));
  if (s.examples) out.push(...s.examples);
  if (s.default !== undefined) out.push(s.default);
  if (s.enum) out.push(...s.enum, 'not-a-member', `${String(s.enum[0])} `, String(s.enum[0]).toUpperCase());
  const types = typesOf(s);
  if (types.includes('null')) out.push(null);
  if (types.includes('boolean')) out.push(true, false, 'yes', 1);
  if (types.includes('integer') || types.includes('number')) {
    const edges = [s.minimum, s.maximum, s.exclusiveMinimum, s.exclusiveMaximum].filter(
      (n): n is number => typeof n === 'number',
    );
    for (const n of edges) out.push(n - 1, n, n + 1);
    out.push(0, 1, -1, 2, 10, 1.5, 2 ** 31, 2 ** 53, 'abc');
  }
  if (types.includes('string') || (types.length === 0 && (s.pattern || s.maxLength !== undefined))) {
    const valid: string[] = [];
    for (const pattern of patternsOf(s)) {
      try {
        const gen = new RandExp(new RegExp(pattern, 'u'));
        gen.max = 8;
        gen.randInt = (a: number, b: number) => a + Math.floor(random() * (b - a + 1));
        for (let i = 0; i < 6; i++) valid.push(gen.gen());
      } catch {
        // A pattern randexp cannot generate from (lookarounds): the examples and awkward values stand in.
      }
    }
    out.push(...valid);
    const lengths = [s.minLength, s.maxLength].filter((n): n is number => typeof n === 'number');
    for (const n of lengths) for (const len of [n - 1, n, n + 1]) if (len >= 0) out.push('a'.repeat(len));
    for (const n of lengths) for (const len of [n - 1, n, n + 1]) if (len >= 0) out.push('é'.repeat(len));
    for (const v of [...valid.slice(0, 2), ...(s.examples ?? []).filter((e): e is string => typeof e === 'string')]) {
      out.push(`${v}\u0000`, `\u0001${v}`, `${v}é`, `${v}ŝ`, v.toUpperCase(), `${v}.`, `${v}..`, `${v}/`, ` ${v}`);
    }
    out.push(...AWKWARD_STRINGS, 1, true);
  }
  if (types.includes('array')) {
    out.push([], 'not-an-array');
    const item = s.items ?? {};
    const sample = candidates(item, random)[0];
    for (const n of [s.minItems, s.maxItems].filter((x): x is number => typeof x === 'number')) {
      for (const len of [n - 1, n, n + 1]) if (len >= 0) out.push(Array.from({ length: len }, () => sample));
    }
  }
  if (types.includes('object')) out.push({}, 'not-an-object', []);
  const seen = new Set<string>();
  return out.filter((v) => {
    const key = JSON.stringify(v) ?? String(v);
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}

/**
 * A value the document accepts for `schema`: the first such candidate; for an object, its first example the document
 * accepts, else its required fields (each a sample of its own); undefined when none is found.
 */
export function sampleOf(
  schema: Schema,
  accepts: (s: Schema, v: unknown) => boolean,
  random: () => number,
  depth = 0,
): unknown {
  if (depth > 8) return undefined;
  if (typesOf(schema).includes('object') || schema.properties) {
    // An object whose fields hang together (a workload: a command or an image) says so by its examples.
    const example = schema.examples?.find((e) => accepts(schema, e));
    if (example !== undefined) return example;
    const out: Json = {};
    for (const name of (schema.required as string[] | undefined) ?? []) {
      const sub = schema.properties?.[name];
      if (sub) out[name] = sampleOf(sub, accepts, random, depth + 1);
    }
    return out;
  }
  if (typesOf(schema).includes('array')) {
    const item = sampleOf(schema.items ?? {}, accepts, random, depth + 1);
    return Array.from({ length: schema.minItems ?? 0 }, () => item);
  }
  return candidates(schema, random).find((v) => v !== null && accepts(schema, v));
}

/** A value as a query, path or header parameter sends it: JSON's scalars as text, arrays repeated. */
export const asText = (v: unknown): string | undefined =>
  typeof v === 'string' ? v : typeof v === 'number' || typeof v === 'boolean' ? String(v) : undefined;

export const INVALID = Symbol('not a value of the type');

/** A parameter's text as the type its schema names (OpenAPI's simple style): numbers, booleans; else the text. */
export function asTyped(schema: Schema, text: string): unknown {
  const types = [...typesOf(schema), ...(schema.anyOf ?? []).flatMap(typesOf)];
  if (types.includes('string')) return text;
  if (types.includes('integer') || types.includes('number')) {
    return /^-?(0|[1-9]\d*)(\.\d+)?$/.test(text) ? Number(text) : INVALID;
  }
  if (types.includes('boolean')) return text === 'true' ? true : text === 'false' ? false : INVALID;
  return text;
}
