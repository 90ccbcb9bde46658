/**
 * The one configuration loader: schema defaults, then the YAML (or JSON)
 * file, then environment variables. Invalid configuration, including a key the
 * schema does not know (a misspelt setting in the file or in a `<PREFIX>__`
 * variable), fails start-up with a message naming every bad key and where its
 * value came from.
 */
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import YAML from 'yaml';
import type { z } from 'zod';

export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConfigError';
  }
}

export interface LoadConfigOptions<S extends z.ZodType> {
  schema: S;
  /**
   * Prefix of the structured environment overrides: `STORAGE__SERVER__PORT=9001`
   * sets `server.port`. Path segments match keys case-insensitively, ignoring
   * underscores (`OBJECT_STORE__DEFAULT_BUCKET` sets `object_store.defaultBucket`).
   */
  envPrefix: string;
  /** Plain environment names mapped to dotted config paths, e.g. `{ PORT: 'server.port' }`. */
  aliases?: Record<string, string>;
  /**
   * Path of the config file; none is read when undefined (or empty). A file named here that does not exist stops
   * start-up (a mistyped path would otherwise leave every setting in it silently at its default), unless
   * `writeDefaultFile` asks for it to be made.
   */
  file?: string;
  /** Write a default file when `file` is absent (the storage service asks for this: its spec says so). */
  writeDefaultFile?: boolean;
  env?: NodeJS.ProcessEnv;
  /** Values applied last, for tests and embedding. */
  overrides?: Record<string, unknown>;
  /**
   * Deprecated key paths and their new places, e.g. `{ database_url: 'database.url' }`: a value found at the old
   * path (in the file or a `<PREFIX>__` variable) is moved to the new one, with a warning (see `configWarnings`).
   * A key spelt in camelCase where the schema has it in snake_case (`defaultBucket` for `default_bucket`) is
   * taken the same way without being listed here.
   */
  renamed?: Record<string, string>;
}

type Tree = Record<string, unknown>;

const isTree = (v: unknown): v is Tree => typeof v === 'object' && v !== null && !Array.isArray(v);
const norm = (s: string) => s.toLowerCase().replaceAll('_', '');

function deepMerge(base: Tree, over: Tree): Tree {
  const out: Tree = { ...base };
  for (const [k, v] of Object.entries(over)) {
    const cur = out[k];
    out[k] = isTree(cur) && isTree(v) ? deepMerge(cur, v) : v;
  }
  return out;
}

/** Sets `value` at the path, matching existing keys of `shape` loosely. */
function setPath(target: Tree, shape: unknown, segments: string[], value: unknown): void {
  let node = target;
  let shapeNode: unknown = shape;
  segments.forEach((raw, i) => {
    const known = isTree(shapeNode) ? Object.keys(shapeNode).find((k) => norm(k) === norm(raw)) : undefined;
    const key = known ?? raw.toLowerCase();
    if (i === segments.length - 1) {
      node[key] = value;
      return;
    }
    if (!isTree(node[key])) node[key] = {};
    node = node[key] as Tree;
    shapeNode = isTree(shapeNode) ? shapeNode[key] : undefined;
  });
}

/** A path as the source map keys it, so `useSSL`, `use_ssl` and `USE_SSL` meet. */
const sourceKey = (segments: readonly PropertyKey[]) => segments.map((s) => norm(String(s))).join('.');

/** One environment variable's contribution: its path and, on its own, the tree it sets. */
interface EnvEntry {
  name: string;
  segments: string[];
  value: string;
}

/** The aliases that are set, then the `<PREFIX>__A__B` variables (which win); other variables are ignored. */
function envEntries(opts: LoadConfigOptions<z.ZodType>): EnvEntry[] {
  const env = opts.env ?? process.env;
  const entries: EnvEntry[] = [];
  for (const [name, path] of Object.entries(opts.aliases ?? {})) {
    const value = env[name];
    if (value === undefined || value === '') continue;
    entries.push({ name, segments: path.split('.'), value });
  }
  const prefix = `${opts.envPrefix}__`;
  for (const [name, value] of Object.entries(env)) {
    if (!name.startsWith(prefix) || value === undefined) continue;
    const segments = name.slice(prefix.length).split('__').filter(Boolean);
    if (segments.length > 0) entries.push({ name, segments, value });
  }
  return entries;
}

/** The parts of a zod schema's definition that the key checks read. */
interface Def {
  type: string;
  shape?: Record<string, z.ZodType>;
  catchall?: z.ZodType;
  innerType?: z.ZodType;
  in?: z.ZodType;
  out?: z.ZodType;
  options?: z.ZodType[];
  valueType?: z.ZodType;
  element?: z.ZodType;
  getter?: () => z.ZodType;
}

const defOf = (schema: z.ZodType) => schema._zod.def as unknown as Def;
const WRAPPERS = new Set(['default', 'prefault', 'optional', 'nullable', 'readonly', 'catch', 'nonoptional']);

/**
 * Dotted paths of the keys in `value` that `schema` does not know: zod objects
 * drop unknown keys silently, which would hide a misspelt setting. Keys a
 * `z.preprocess` step maps onto the schema (the registry's flat spec names)
 * count as known; records and loose objects take any key.
 */
function unknownKeys(schema: z.ZodType, value: unknown, path: string[] = []): string[] {
  const def = defOf(schema);
  if (WRAPPERS.has(def.type)) return def.innerType ? unknownKeys(def.innerType, value, path) : [];
  switch (def.type) {
    case 'object': {
      if (!isTree(value)) return [];
      const rest = def.catchall && defOf(def.catchall).type !== 'never' ? def.catchall : undefined;
      return Object.entries(value).flatMap(([key, v]) => {
        const field = def.shape && Object.hasOwn(def.shape, key) ? def.shape[key] : rest;
        return field ? unknownKeys(field, v, [...path, key]) : [[...path, key].join('.')];
      });
    }
    case 'pipe': {
      if (!def.in || !def.out) return [];
      if (defOf(def.in).type !== 'transform') return unknownKeys(def.in, value, path);
      const pre = def.in.safeParse(value);
      return pre.success ? unknownKeys(def.out, pre.data, path) : [];
    }
    case 'union': {
      const match = def.options?.find((option) => option.safeParse(value).success);
      return match ? unknownKeys(match, value, path) : [];
    }
    case 'record':
      return isTree(value) && def.valueType
        ? Object.entries(value).flatMap(([k, v]) => unknownKeys(def.valueType as z.ZodType, v, [...path, k]))
        : [];
    case 'array':
      return Array.isArray(value) && def.element
        ? value.flatMap((v, i) => unknownKeys(def.element as z.ZodType, v, [...path, String(i)]))
        : [];
    case 'lazy':
      return def.getter ? unknownKeys(def.getter(), value, path) : [];
    default:
      return [];
  }
}

/** The object shape `schema` validates a mapping against, through wrappers and pipes. */
function shapeOf(schema: z.ZodType): Record<string, z.ZodType> | undefined {
  const def = defOf(schema);
  if (WRAPPERS.has(def.type)) return def.innerType && shapeOf(def.innerType);
  if (def.type === 'object') return def.shape;
  if (def.type === 'pipe' && def.in && def.out) return shapeOf(defOf(def.in).type === 'transform' ? def.out : def.in);
  return undefined;
}

/**
 * The defaults as the loader merges them and writes them to a file: keys that
 * are optional without a default are left out, so what the schema derives from
 * their absence (`registry.enabled` follows `registry.address`) stays derived.
 */
function fileDefaults(schema: z.ZodType, value: unknown): unknown {
  const shape = shapeOf(schema);
  if (!shape || !isTree(value)) return value;
  const out: Tree = {};
  for (const [key, v] of Object.entries(value)) {
    const field = Object.hasOwn(shape, key) ? shape[key] : undefined;
    if (!field) out[key] = v;
    else if (defOf(field).type !== 'optional') out[key] = fileDefaults(field, v);
  }
  return out;
}

function readFile(file: string): Tree {
  let parsed: unknown;
  try {
    parsed = YAML.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new ConfigError(`cannot read configuration file ${file}: ${(err as Error).message}`);
  }
  if (parsed === null || parsed === undefined) return {};
  if (!isTree(parsed)) throw new ConfigError(`configuration file ${file} must hold a mapping at its top level`);
  return parsed;
}

const warningsOf = new WeakMap<object, string[]>();

/** What loading the configuration warned about (deprecated key names): a server logs these once it has a logger. */
export function configWarnings(config: object): readonly string[] {
  return warningsOf.get(config) ?? [];
}

/** Moves the value at `from` (dotted) to `to` in `tree`; true when there was one. */
function moveKey(tree: Tree, from: string, to: string): boolean {
  const src = from.split('.');
  const parents: Tree[] = [];
  let node: unknown = tree;
  for (const seg of src.slice(0, -1)) {
    if (isTree(node)) parents.push(node);
    node = isTree(node) ? node[seg] : undefined;
  }
  const last = src[src.length - 1]!;
  if (!isTree(node) || !Object.hasOwn(node, last)) return false;
  const value = node[last];
  delete node[last];
  // A section left empty by the move (`events` after `events.stream` moved) goes too: it is no key of the schema.
  for (let i = parents.length - 1; i >= 0; i--) {
    const child = parents[i]![src[i]!];
    if (!isTree(child) || Object.keys(child).length > 0) break;
    delete parents[i]![src[i]!];
  }
  const dst = to.split('.');
  let target = tree;
  for (const seg of dst.slice(0, -1)) {
    if (!isTree(target[seg])) target[seg] = {};
    target = target[seg] as Tree;
  }
  const end = dst[dst.length - 1]!;
  // The new name wins where both are given.
  if (!Object.hasOwn(target, end)) target[end] = value;
  else if (isTree(target[end]) && isTree(value)) target[end] = deepMerge(value, target[end] as Tree);
  return true;
}

/** Renames keys of `tree` that match a snake_case key of the schema only loosely (`useSSL` for `use_ssl`). */
function looseKeys(schema: z.ZodType, tree: unknown, path: string[], renamed: (from: string, to: string) => void) {
  const shape = shapeOf(schema);
  if (!shape || !isTree(tree)) return;
  for (const key of Object.keys(tree)) {
    let field = Object.hasOwn(shape, key) ? key : undefined;
    if (!field) {
      field = Object.keys(shape).find((k) => norm(k) === norm(key) && !Object.hasOwn(tree, k));
      if (field) {
        tree[field] = tree[key];
        delete tree[key];
        renamed([...path, key].join('.'), [...path, field].join('.'));
      }
    }
    if (field) looseKeys(shape[field]!, tree[field], [...path, field], renamed);
  }
}

/** Loads, validates and returns the configuration; `instance_id` is generated when empty. */
export function loadConfig<S extends z.ZodType>(opts: LoadConfigOptions<S>): z.output<S> {
  const defaults = fileDefaults(opts.schema, opts.schema.parse({})) as Tree;
  let fromFile: Tree = {};
  if (opts.file) {
    if (existsSync(opts.file)) {
      fromFile = readFile(opts.file);
    } else if (opts.writeDefaultFile) {
      mkdirSync(dirname(opts.file), { recursive: true });
      writeFileSync(opts.file, `# default configuration, written at first start\n${YAML.stringify(defaults)}`);
    } else {
      throw new ConfigError(`configuration file ${opts.file} does not exist`);
    }
  }
  const problems: string[] = [];
  const problem = (key: string, message: string, source: string) =>
    problems.push(`  ${key || '(root)'}: ${message} (from ${source})`);
  const warnings: string[] = [];
  const deprecated = (from: string, to: string, source: string) =>
    warnings.push(
      `configuration key ${from} (${source}) is deprecated: use ${to}; the old name goes in a later release`,
    );
  for (const [from, to] of Object.entries(opts.renamed ?? {})) {
    if (moveKey(fromFile, from, to)) deprecated(from, to, `file ${opts.file}`);
  }
  looseKeys(opts.schema, fromFile, [], (from, to) => deprecated(from, to, `file ${opts.file}`));
  for (const key of unknownKeys(opts.schema, fromFile)) problem(key, 'unknown key', `file ${opts.file}`);

  const fromEnv: Tree = {};
  const sources = new Map<string, string>();
  const renames = Object.entries(opts.renamed ?? {}).map(([from, to]) => ({ from: from.split('.'), to }));
  for (const entry of envEntries(opts as LoadConfigOptions<z.ZodType>)) {
    const { name, value } = entry;
    let { segments } = entry;
    // A variable naming a deprecated path (or a section of it) is moved to the new path.
    const old = renames.find(
      (r) => r.from.length <= segments.length && r.from.every((seg, i) => norm(seg) === norm(segments[i]!)),
    );
    if (old) {
      const moved = [...old.to.split('.'), ...segments.slice(old.from.length)];
      // Plain aliases (`DATABASE_URL`) are the service's own names for a path: only `<PREFIX>__` names are old.
      if (name.startsWith(`${opts.envPrefix}__`)) {
        deprecated(segments.join('.').toLowerCase(), moved.join('.'), `environment variable ${name}`);
      }
      segments = moved;
    }
    const own: Tree = {};
    setPath(own, defaults, segments, value);
    for (const key of unknownKeys(opts.schema, own)) problem(key, 'unknown key', `environment variable ${name}`);
    setPath(fromEnv, defaults, segments, value);
    sources.set(sourceKey(segments), `environment variable ${name}`);
  }
  const sourceOf = (path: readonly PropertyKey[]) => {
    for (let n = path.length; n > 0; n--) {
      const source = sources.get(sourceKey(path.slice(0, n)));
      if (source) return source;
    }
    return opts.file ? `file ${opts.file} or default` : 'default';
  };

  const merged = deepMerge(deepMerge(deepMerge(defaults, fromFile), fromEnv), opts.overrides ?? {});
  const result = opts.schema.safeParse(merged);
  if (!result.success) {
    for (const issue of result.error.issues) problem(issue.path.join('.'), issue.message, sourceOf(issue.path));
  }
  if (problems.length > 0 || !result.success) throw new ConfigError(`invalid configuration:\n${problems.join('\n')}`);
  const config = result.data as Tree;
  if ('instance_id' in config && !config.instance_id) config.instance_id = randomUUID();
  warningsOf.set(config, warnings);
  return config as z.output<S>;
}

/**
 * Where a contract check writes what it finds (`OPENAPI_CHECK_FILE`): when set, every app checks each answer of a
 * documented operation against its own OpenAPI document and appends each mismatch to this file, one JSON line each.
 * The test command sets it and fails on any line (docs/conventions.md, "API documents"); unset, nothing is checked.
 */
export function contractCheckFile(env: NodeJS.ProcessEnv = process.env): string | undefined {
  return env.OPENAPI_CHECK_FILE || undefined;
}
