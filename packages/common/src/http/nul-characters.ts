/**
 * No NUL characters, and no unpaired surrogates, in request text. PostgreSQL cannot store U+0000 in `text` or `jsonb`
 * (it answers "invalid byte sequence" or "unsupported Unicode escape sequence"), nor a lone surrogate in `jsonb` (a
 * JSON body's `"\ud800"`: "invalid input syntax"), so a JSON body or query string carrying one would otherwise fail
 * deep inside a repository as a 500. This hook refuses it first, for every route of every service, with the
 * platform's 400 naming the field. It runs after authentication (onRequest) and body parsing, before the route's
 * schema validation; raw bodies (storage uploads) are not parsed and so not looked at. The OpenAPI documents say so
 * (`stateNulFree`, applied by `finishDocument` to every JSON body and query parameter).
 */
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { errors } from '../errors.ts';

/** Text without U+0000, as the documents state it: the `pattern` of every string the hook below looks at. */
const NUL_FREE_PATTERN = '^[^\\u0000]*$';

type JsonSchema = Record<string, unknown>;

/**
 * Whether a pattern may match text holding U+0000: unless it is anchored at both ends and only ever names the
 * characters it takes (no `.`, no negated class but one that starts by refusing U+0000, no `\S`, `\W` or `\D`, no
 * U+0000 itself), assume it may.
 */
function mayMatchNul(pattern: string): boolean {
  // Unanchored, it takes whatever text holds what it matches.
  if (!pattern.startsWith('^') || !pattern.endsWith('$') || pattern.endsWith('\\$')) return true;
  if (/\\[SWD]/.test(pattern)) return true;
  const plain = pattern
    // Lookarounds match nothing themselves (one level of groups inside them).
    .replace(/\(\?<?[!=](?:[^()]|\([^()]*\))*\)/g, '')
    // A class that refuses U+0000 first, and a class that is not negated, take no U+0000 (unless they name it).
    .replace(/\[\^\\u0000[^\]]*\]/g, '')
    .replace(/\[(?!\^)((?:\\.|[^\]\\])*)\]/g, (_, inner: string) => (/\\u0000|\\x00|\\0/.test(inner) ? inner : 'x'));
  if (/\\u0000|\\x00|\\0/.test(plain)) return true;
  const unescaped = plain.replace(/\\./g, '');
  return unescaped.includes('.') || unescaped.includes('[^');
}

/**
 * Says in a request's JSON schema (in place, at any depth, `$ref`s resolved through `resolve`) what the hook refuses:
 * every string that may hold U+0000 gets `NUL_FREE_PATTERN` beside its own rules (in `allOf`), and every map's keys
 * (`propertyNames`) too. An `enum` or `const` names its values already.
 */
export function stateNulFree(
  schema: unknown,
  resolve: (ref: string) => JsonSchema | undefined,
  seen = new Set<unknown>(),
): void {
  if (Array.isArray(schema)) {
    for (const item of schema) stateNulFree(item, resolve, seen);
    return;
  }
  if (!schema || typeof schema !== 'object' || seen.has(schema)) return;
  seen.add(schema);
  const s = schema as JsonSchema;
  if (typeof s.$ref === 'string') {
    stateNulFree(resolve(s.$ref), resolve, seen);
    return;
  }
  const types = Array.isArray(s.type) ? s.type : [s.type];
  if (types.includes('string') && s.enum === undefined && s.const === undefined) {
    const patterns = [s.pattern, ...((s.allOf as JsonSchema[] | undefined) ?? []).map((p) => p.pattern)].filter(
      (p): p is string => typeof p === 'string',
    );
    if (patterns.every(mayMatchNul)) {
      if (s.pattern === undefined) s.pattern = NUL_FREE_PATTERN;
      else s.allOf = [...((s.allOf as JsonSchema[] | undefined) ?? []), { pattern: NUL_FREE_PATTERN }];
    }
  }
  if (types.includes('object') && s.additionalProperties !== false && s.propertyNames === undefined) {
    s.propertyNames = { pattern: NUL_FREE_PATTERN };
  }
  for (const [key, value] of Object.entries(s)) {
    if (key !== 'propertyNames' && value && typeof value === 'object') stateNulFree(value, resolve, seen);
  }
}

/** What is wrong with a text PostgreSQL cannot store, or undefined when it can. */
function unstorable(text: string): string | undefined {
  if (text.includes('\u0000')) return 'must not contain NUL (U+0000) characters';
  // A lone surrogate (JSON's "\ud800" unpaired): jsonb refuses it, and it is no character of any text.
  if (!text.isWellFormed()) return 'must be well-formed Unicode (no unpaired surrogate)';
  return undefined;
}

/** The path (`body.gpus.0.name`) of the first string or key PostgreSQL cannot store, and why; or undefined. */
function unstorablePath(value: unknown, path: string, depth = 0): { path: string; why: string } | undefined {
  if (typeof value === 'string') {
    const why = unstorable(value);
    return why ? { path, why } : undefined;
  }
  // Deeper than any schema the platform accepts: schema validation refuses such a body anyway.
  if (value === null || typeof value !== 'object' || depth > 32) return undefined;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = unstorablePath(value[i], `${path}.${i}`, depth + 1);
      if (found) return found;
    }
    return undefined;
  }
  if (Buffer.isBuffer(value)) return undefined;
  for (const [key, v] of Object.entries(value)) {
    const why = unstorable(key);
    const found = why ? { path: `${path}.${key.toWellFormed()}`, why } : unstorablePath(v, `${path}.${key}`, depth + 1);
    if (found) return found;
  }
  return undefined;
}

export const refuseNulCharacters = fp(
  async (app: FastifyInstance) => {
    app.addHook('preValidation', async (request) => {
      const found = unstorablePath(request.body, 'body') ?? unstorablePath(request.query, 'querystring');
      if (found) {
        throw errors.validation(`text ${found.why}`, [{ path: found.path, message: found.why }]);
      }
    });
  },
  { name: 'refuse-nul-characters' },
);
