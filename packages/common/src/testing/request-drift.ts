/**
 * Whether a service's OpenAPI document says what its validation enforces: for every documented request field (path,
 * query and header parameters, and each field of a JSON body, at any depth), values are generated from the field's
 * schema in the document (its bounds and their neighbours, samples of its pattern, its enum and examples, and a set of
 * awkward values: empty, NUL and control characters, characters past U+007E and U+FFFF, dot segments, an IP address,
 * dates at 1970 and 2100, durations, numbers at and past every bound: `request-values.ts`), and each is sent to the
 * service as the field of the smallest request the document accepts (each required field sampled), so the service's
 * rules past its schemas answer too; a request the service refuses as it is (a rule between fields) leaves each field
 * alone in its parents. The document's verdict (the field's schema, JSON Schema 2020-12 with the platform's extensions,
 * `SCHEMA_EXTENSIONS`, and the service's own) must be the service's: a value the document accepts is never refused
 * with a 400 naming the field, and a value the document refuses always is. Each disagreement is reported as a line.
 *
 * `format` is an annotation (JSON Schema 2020-12's default): what a field asserts is in its `pattern`, bounds and
 * `enum`, which the schemas the services are built from state for every format they check.
 */
import { Ajv2020 } from 'ajv/dist/2020.js';
import type { FastifyInstance, InjectOptions } from 'fastify';
import { SCHEMA_EXTENSIONS } from '../openapi/extensions.ts';
import { uninjected } from './issuer.ts';
import {
  asText,
  asTyped,
  candidates,
  INVALID,
  inline,
  isObject,
  type Json,
  type Schema,
  sampleOf,
  seeded,
  typesOf,
} from './request-values.ts';

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
        .find(
          // A path's text read as the parameter's type (a part number is a number), as the document reads it.
          (v) => v !== undefined && v !== '' && !v.includes('/') && documentAccepts(p.schema, asTyped(p.schema, v)),
        );
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
