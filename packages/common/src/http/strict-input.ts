/**
 * Unknown fields in a request body are refused: a body's schema is made strict at every depth before the route is
 * compiled, so `{"rates": {...}}` sent where `{"base_rate": ...}` was meant answers 400 naming `body.rates` instead
 * of 200 with nothing changed. Done once, here, for every route of every service (createApp's onRoute hook), so a
 * new route cannot forget it, and the OpenAPI document shows the same schema (`additionalProperties: false`).
 *
 * What stays open, on purpose:
 * - a schema marked with `ignoringUnknownFields` (unknown fields dropped, at any depth below it): a body that must
 *   ignore unknown parameters (the OAuth token endpoint: RFC 6749 §3.2), and what a provider daemon sends again and
 *   again (heartbeats, usage reports), so that a daemon newer than the platform keeps its machine online and billed
 *   instead of failing every minute, over HTTP as over NATS;
 * - an object written with an explicit catch-all (`z.looseObject`, `.catchall(...)`), whose unknown fields reach
 *   the handler;
 * - the keys of a record (`metadata`), which are the caller's own; its values are made strict like any other.
 *
 * Zod 4 checks intersections of strict objects side by side (a key either side knows is known), so intersections are
 * made strict as well. A strict copy keeps its original as parent, so descriptions (and other metadata but the id)
 * carry over to the document.
 */
import { z } from 'zod';

const cache = new WeakMap<z.ZodType, z.ZodType>();

/** The metadata key marking a schema whose unknown fields are dropped (it shows as such in the OpenAPI document). */
const IGNORED = 'x-unknown-fields';

/** The schema, marked to drop unknown fields at any depth instead of refusing them (see above for when). */
export function ignoringUnknownFields<T extends z.ZodType>(schema: T): T {
  return schema.meta({ [IGNORED]: 'ignored' }) as T;
}

/** The schema with every plain object in it strict (unknown keys refused), at any depth. */
export function strictInput<T extends z.ZodType>(schema: T): T {
  const known = cache.get(schema);
  if (known) return known as T;
  const strict = makeStrict(schema);
  cache.set(schema, strict);
  return strict as T;
}

/** A clone of `schema` with some of its definition replaced, inheriting its metadata. */
function cloneWith(schema: z.ZodType, changes: Record<string, unknown>): z.ZodType {
  // Spreading the definition reads its getters (an object's `shape` is one) into plain values.
  return schema.clone({ ...schema._zod.def, ...changes } as typeof schema._zod.def, { parent: true });
}

/** Replaces inner schemas, returning the schema itself when none changed (so the cache keeps identities). */
function rebuild(schema: z.ZodType, changes: Record<string, unknown>, before: Record<string, unknown>): z.ZodType {
  const changed = Object.keys(changes).some((k) => !sameSchemas(changes[k], before[k]));
  return changed ? cloneWith(schema, changes) : schema;
}

function sameSchemas(a: unknown, b: unknown): boolean {
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((x, i) => x === b[i]);
  if (a && b && typeof a === 'object' && typeof b === 'object' && !(a instanceof z.ZodType)) {
    const ka = Object.keys(a);
    return ka.length === Object.keys(b).length && ka.every((k) => (a as never)[k] === (b as never)[k]);
  }
  return a === b;
}

function makeStrict(schema: z.ZodType): z.ZodType {
  // Zod's definitions are a closed union of kinds: each kind that holds input schemas is walked, the rest are leaves.
  if (z.globalRegistry.get(schema)?.[IGNORED] === 'ignored') return schema;
  const def = schema._zod.def as unknown as Record<string, unknown> & { type: string };
  const inner = (s: unknown) => strictInput(s as z.ZodType);
  switch (def.type) {
    case 'object': {
      const shape = def.shape as Record<string, z.ZodType>;
      const strictShape = Object.fromEntries(Object.entries(shape).map(([k, v]) => [k, inner(v)]));
      // No catch-all is zod's default "strip"; one given explicitly (looseObject, catchall) is kept, made strict.
      const catchall = def.catchall === undefined ? z.never() : inner(def.catchall);
      return cloneWith(schema, { shape: strictShape, catchall });
    }
    case 'array':
      return rebuild(schema, { element: inner(def.element) }, { element: def.element });
    case 'optional':
    case 'nullable':
    case 'default':
    case 'prefault':
    case 'nonoptional':
    case 'readonly':
    case 'catch':
    case 'promise':
      return rebuild(schema, { innerType: inner(def.innerType) }, { innerType: def.innerType });
    case 'pipe':
      // Only the pipe's input side sees the request as sent.
      return rebuild(schema, { in: inner(def.in) }, { in: def.in });
    case 'union': {
      const options = (def.options as z.ZodType[]).map(inner);
      return rebuild(schema, { options }, { options: def.options });
    }
    case 'intersection':
      return rebuild(schema, { left: inner(def.left), right: inner(def.right) }, { left: def.left, right: def.right });
    case 'record':
      return rebuild(schema, { valueType: inner(def.valueType) }, { valueType: def.valueType });
    case 'tuple': {
      const items = (def.items as z.ZodType[]).map(inner);
      const rest = def.rest ? inner(def.rest) : def.rest;
      return rebuild(schema, { items, rest }, { items: def.items, rest: def.rest });
    }
    case 'lazy': {
      const getter = def.getter as () => z.ZodType;
      return cloneWith(schema, { getter: () => inner(getter()) });
    }
    default:
      return schema;
  }
}

interface ValidationEntry {
  keyword?: string;
  instancePath: string;
  message?: string;
  params?: { keys?: unknown };
}

/**
 * A validation error's entries with each unknown key as an entry of its own whose path names the key
 * (`/rates`: "unknown field"), instead of one entry at the enclosing object listing them in its message.
 */
export function unknownKeysAsFields<E extends ValidationEntry>(entries: readonly E[]): E[] {
  return entries.flatMap((v) => {
    const keys = v.params?.keys;
    if (v.keyword !== 'unrecognized_keys' || !Array.isArray(keys)) return [v];
    const base = v.instancePath.replace(/\/$/, '');
    return keys.map((key) => ({ ...v, instancePath: `${base}/${String(key)}`, message: 'unknown field' }));
  });
}
