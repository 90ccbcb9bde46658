/**
 * Whether a service's OpenAPI document says what its validation enforces: for every documented request field (path,
 * query and header parameters, and each field of a JSON body, at any depth), values are generated from the field's
 * schema in the document (its bounds and their neighbours, samples of its pattern, its enum and examples, and a set of
 * awkward values: empty, NUL and control characters, characters past U+007E and U+FFFF, dot segments, an IP address,
 * dates at 1970 and 2100, durations, numbers at and past every bound), and each is sent to the service alone, as the
 * field of an otherwise empty request. The document's verdict (the field's schema, JSON Schema 2020-12 with the
 * platform's extensions, `SCHEMA_EXTENSIONS`) must be the service's: a value the document accepts is never refused
 * with a 400 naming the field, and a value the document refuses always is. Each disagreement is reported as a line.
 *
 * `format` is an annotation (JSON Schema 2020-12's default): what a field asserts is in its `pattern`, bounds and
 * `enum`, which the schemas the services are built from state for every format they check.
 */
import { Ajv2020 } from 'ajv/dist/2020.js';
import type { FastifyInstance, InjectOptions } from 'fastify';
import randexp from 'randexp';
import { SCHEMA_EXTENSIONS } from '../openapi/extensions.ts';
import { uninjected } from './issuer.ts';

// randexp is CommonJS whose module.exports is the class (its types name it `default`).
const RandExp = randexp as unknown as typeof randexp.default;

type Json = Record<string, unknown>;
type Schema = Json & {
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

export interface DriftOptions {
  app: FastifyInstance;
  /**
   * Headers of the callers to try, in turn, for each operation: the first one the operation does not refuse before
   * validating (401, or 403 for the caller's role or scope) is used for all of its requests.
   */
  callers: Record<string, string>[];
  /** Operations (`POST /path/{param}`) left out, each with the reason. */
  skip?: Record<string, string>;
  /**
   * Fields left out, each with the reason: a rule no schema can state (an opaque cursor only the service can read, a
   * bound that moves with the time of the request), which the field's description states instead. A key names one
   * operation's field (`POST /path body.field`) or the field in every operation (`querystring.cursor`).
   */
  skipFields?: Record<string, string>;
  /** Seed of the pattern samples (the same values every run). */
  seed?: number;
  /** The service's own schema extensions (`x-...`), each with its check, beside the platform's (`SCHEMA_EXTENSIONS`). */
  extensions?: Record<string, (value: string, limit: never) => boolean>;
}

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
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const isObject = (v: unknown): v is Json => v !== null && typeof v === 'object' && !Array.isArray(v);

/** The field's schema with every `$ref` into the document replaced by what it names. */
function inline(doc: Json, schema: unknown, depth = 0): Schema {
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

const typesOf = (s: Schema): string[] => (Array.isArray(s.type) ? s.type : s.type ? [s.type] : []);

/** The patterns a string schema asserts (its own and its `allOf`'s). */
const patternsOf = (s: Schema): string[] => [
  ...(s.pattern ? [s.pattern] : []),
  ...(s.allOf ?? []).flatMap((p) => patternsOf(p)),
];

/** Candidate values for a schema: valid-looking ones first, then its edges and the awkward ones. */
function candidates(s: Schema, random: () => number): unknown[] {
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

interface Parameter {
  name: string;
  in: 'path' | 'query' | 'header' | 'cookie';
  required?: boolean;
  schema: Schema;
}

interface Operation {
  method: string;
  path: string;
  parameters: Parameter[];
  body?: Schema;
}

/** A field of a request to vary: where it is, its schema, and how to put a value there. */
interface Field {
  /** `body.workload.inputs.0.key`, `querystring.limit`, `params.bucketName`, `headers.idempotency-key`. */
  path: string;
  schema: Schema;
  place: (value: unknown) => Partial<{ params: Record<string, string>; query: string; headers: Json; body: unknown }>;
}

/**
 * A value the document accepts for `schema`: the first such candidate; for an object, its required fields (each a
 * sample of its own); undefined when none is found.
 */
function sampleOf(
  schema: Schema,
  accepts: (s: Schema, v: unknown) => boolean,
  random: () => number,
  depth = 0,
): unknown {
  if (depth > 8) return undefined;
  if (typesOf(schema).includes('object') || schema.properties) {
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

/**
 * The fields of a body schema, at every depth (an array's items as its element 0). A field's value is put in a body
 * that is otherwise the smallest one the document accepts (`base`: each object's required fields sampled), so the
 * service gets past every rule but the field's own and answers for it; without `base`, alone in its parents.
 */
function bodyFields(
  schema: Schema,
  path: string[],
  wrap: (v: unknown) => unknown,
  into: Field[],
  base: ((s: Schema) => Json) | undefined,
  depth = 0,
): void {
  if (depth > 8) return;
  for (const branch of [...(schema.anyOf ?? []), ...(schema.oneOf ?? [])]) {
    if (isObject(branch.properties)) bodyFields(branch, path, wrap, into, base, depth + 1);
  }
  for (const [name, sub] of Object.entries(schema.properties ?? {})) {
    const at = [...path, name];
    const put = (v: unknown) => wrap({ ...(base ? base(schema) : {}), [name]: v });
    into.push({ path: ['body', ...at].join('.'), schema: sub, place: (v) => ({ body: put(v) }) });
    if (typesOf(sub).includes('object') || sub.properties) bodyFields(sub, at, put, into, base, depth + 1);
    if (sub.items) {
      const item = sub.items;
      const putItem = (v: unknown) => put([v]);
      into.push({ path: ['body', ...at, '0'].join('.'), schema: item, place: (v) => ({ body: putItem(v) }) });
      if (item.properties) bodyFields(item, [...at, '0'], putItem, into, base, depth + 1);
    }
  }
}

/** A value as a query, path or header parameter sends it: JSON's scalars as text, arrays repeated. */
const asText = (v: unknown): string | undefined =>
  typeof v === 'string' ? v : typeof v === 'number' || typeof v === 'boolean' ? String(v) : undefined;

/** Whether a string can travel as an HTTP header value at all (else it is no request the document could describe). */
const headerSafe = (v: string) => /^[\t\x20-\x7e\x80-\xff]*$/.test(v) && v.trim() === v;

/**
 * Each documented request field of the app's operations checked as above; the disagreements, one line each
 * (`POST /path body.field "value": the document accepts it, the service refused it (400 ...)`).
 */
export async function requestSchemaDrift(opts: DriftOptions): Promise<string[]> {
  const { app } = opts;
  const inject = uninjected(app);
  const doc = (await inject({ method: 'GET', url: '/docs/json' })).json() as Json;
  const ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: false });
  for (const [keyword, check] of Object.entries({ ...SCHEMA_EXTENSIONS, ...opts.extensions })) {
    ajv.addKeyword({
      keyword,
      type: 'string',
      schemaType: ['number', 'string'],
      validate: (limit: number | string, value: string) => check(value, limit as never),
      errors: false,
    });
  }
  const random = seeded(opts.seed ?? 50);
  const drift: string[] = [];

  const operations: Operation[] = [];
  for (const [path, item] of Object.entries(doc.paths as Record<string, Record<string, Json>>)) {
    for (const [method, op] of Object.entries(item)) {
      if (!['get', 'put', 'post', 'patch', 'delete'].includes(method)) continue;
      const name = `${method.toUpperCase()} ${path}`;
      if (opts.skip?.[name]) continue;
      const content = (op.requestBody as { content?: Record<string, { schema?: unknown }> } | undefined)?.content;
      const json = content?.['application/json']?.schema;
      operations.push({
        method: method.toUpperCase(),
        path,
        parameters: ((op.parameters ?? []) as Parameter[]).map((p) => ({ ...p, schema: inline(doc, p.schema) })),
        ...(json ? { body: inline(doc, json) } : {}),
      });
    }
  }

  const validators = new Map<Schema, (v: unknown) => boolean>();
  const documentAccepts = (schema: Schema, value: unknown) => {
    let v = validators.get(schema);
    if (!v) {
      const compiled = ajv.compile(schema);
      v = (x: unknown) => compiled(x) as boolean;
      validators.set(schema, v);
    }
    return v(value);
  };

  for (const op of operations) {
    const name = `${op.method} ${op.path}`;
    // Every path parameter needs a value the document accepts, for the others' requests to reach the route.
    const validPath: Record<string, string> = {};
    for (const p of op.parameters.filter((x) => x.in === 'path')) {
      const ok = candidates(p.schema, random)
        .map(asText)
        .find((v) => v !== undefined && v !== '' && !v.includes('/') && documentAccepts(p.schema, v));
      validPath[p.name] = ok ?? 'x';
    }
    const url = (params: Record<string, string>, query = '') =>
      op.path.replace(/\{([^}]+)\}/g, (_, n: string) => encodeURIComponent(params[n] ?? validPath[n] ?? 'x')) +
      (query ? `?${query}` : '');
    const send = async (headers: Json, req: ReturnType<Field['place']>) =>
      inject({
        method: op.method as InjectOptions['method'],
        url: url(req.params ?? {}, req.query),
        headers: { ...headers, ...(req.headers as Record<string, string>) },
        ...(req.body !== undefined ? { payload: req.body as InjectOptions['payload'] } : {}),
      } as InjectOptions);

    // The smallest body the document accepts: each field is sent inside it, so the service's rules past the schema
    // (in its handlers) answer for the field too. A body the service refuses as it is (a rule between fields) is
    // left out: each field then goes alone.
    const base = (schema: Schema) => (sampleOf(schema, documentAccepts, random) ?? {}) as Json;
    const baseBody = op.body ? sampleOf(op.body, documentAccepts, random) : undefined;

    // The first caller the operation lets through to validation.
    let caller: Json | undefined;
    let complete = false;
    for (const headers of opts.callers) {
      const probe = await send(headers, baseBody === undefined ? {} : { body: baseBody });
      complete = probe.statusCode !== 400;
      let code = '';
      try {
        code = (probe.json() as { code?: string } | undefined)?.code ?? '';
      } catch {}
      // The access checks' own refusals (a 401 of a route's own, wrong credentials at login, is its answer).
      const refusedCaller =
        (probe.statusCode === 401 && ['MISSING_TOKEN', 'INVALID_TOKEN', 'TOKEN_EXPIRED'].includes(code)) ||
        (probe.statusCode === 403 && ['ROLE_REQUIRED', 'INSUFFICIENT_SCOPE', 'EMAIL_NOT_VERIFIED'].includes(code));
      if (!refusedCaller) {
        caller = headers;
        break;
      }
    }
    if (!caller) {
      drift.push(`${name}: no caller given gets past its access checks to its validation`);
      continue;
    }

    const fields: Field[] = [];
    for (const p of op.parameters) {
      if (p.in === 'path')
        fields.push({
          path: `params.${p.name}`,
          schema: p.schema,
          place: (v) => ({ params: { [p.name]: v as string } }),
        });
      if (p.in === 'query') {
        fields.push({
          path: `querystring.${p.name}`,
          schema: p.schema,
          place: (v) => ({
            query: (Array.isArray(v) ? v : [v])
              .map((x) => `${encodeURIComponent(p.name)}=${encodeURIComponent(asText(x) ?? '')}`)
              .join('&'),
          }),
        });
      }
      if (p.in === 'header')
        fields.push({ path: `headers.${p.name}`, schema: p.schema, place: (v) => ({ headers: { [p.name]: v } }) });
    }
    if (op.body) bodyFields(op.body, [], (v) => v, fields, complete ? base : undefined);

    for (const field of fields) {
      if (opts.skipFields?.[`${name} ${field.path}`] || opts.skipFields?.[field.path]) continue;
      const inParams = field.path.startsWith('params.');
      const inHeaders = field.path.startsWith('headers.');
      const inQuery = field.path.startsWith('querystring.');
      // A query parameter that repeats (an array): each value alone, and the lists at its bounds.
      const repeated = inQuery && typesOf(field.schema).includes('array');
      const values = repeated
        ? [
            ...candidates(field.schema.items ?? {}, random).map((v) => [v]),
            ...candidates(field.schema, random).filter(Array.isArray),
          ]
        : candidates(field.schema, random);
      for (const value of values) {
        let sent: unknown = value;
        let typed: unknown = value;
        if (repeated) {
          const texts = (value as unknown[]).map(asText);
          if (texts.some((t) => t === undefined)) continue;
          sent = texts;
          typed = texts.map((t) => asTyped(field.schema.items ?? {}, t as string));
          if ((typed as unknown[]).includes(INVALID)) typed = INVALID;
        } else if (inParams || inHeaders || inQuery) {
          const text = asText(value);
          // Not a value a path segment or header can carry as such: the document describes no such request.
          if (text === undefined) continue;
          // An empty segment, or a dot segment (`.`, `..`), which clients resolve away (RFC 3986), is no parameter's
          // value; nor is a `/` but in the path's last parameter, which takes the rest of the path.
          if (inParams && (text === '' || text === '.' || text === '..')) continue;
          if (inParams && text.includes('/') && !field.path.endsWith('Key')) continue;
          if (inHeaders && !headerSafe(text)) continue;
          sent = text;
          // A parameter's value is text on the wire: the document reads it as its type (a number, a boolean).
          typed = asTyped(field.schema, text);
        }
        const accepts = typed !== INVALID && documentAccepts(field.schema, typed);
        const placed = field.place(sent);
        const res = await send(caller, complete && placed.body === undefined ? { ...placed, body: baseBody } : placed);
        let problem: { code?: string; errors?: { path: string; message: string }[] } = {};
        try {
          problem = res.json();
        } catch {}
        const named = (problem.errors ?? []).filter(
          (e) => e.path === field.path || e.path.startsWith(`${field.path}.`),
        );
        const refused = res.statusCode === 400 && named.length > 0;
        if (accepts === refused) {
          const shown = JSON.stringify(value)?.slice(0, 80);
          drift.push(
            `${name} ${field.path} ${shown}: the document ${accepts ? 'accepts' : 'refuses'} it, the service ` +
              (refused
                ? `refused it (${res.statusCode} ${problem.code ?? ''}: ${named[0]?.message ?? ''})`
                : `did not (${res.statusCode} ${problem.code ?? ''})`),
          );
        }
      }
    }
  }
  return drift;
}

const INVALID = Symbol('not a value of the type');

/** A parameter's text as the type its schema names (OpenAPI's simple style): numbers, booleans; else the text. */
function asTyped(schema: Schema, text: string): unknown {
  const types = [...typesOf(schema), ...(schema.anyOf ?? []).flatMap(typesOf)];
  if (types.includes('string')) return text;
  if (types.includes('integer') || types.includes('number')) {
    return /^-?(0|[1-9]\d*)(\.\d+)?$/.test(text) ? Number(text) : INVALID;
  }
  if (types.includes('boolean')) return text === 'true' ? true : text === 'false' ? false : INVALID;
  return text;
}
