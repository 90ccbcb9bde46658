/**
 * The one configuration loader: schema defaults, then the YAML (or JSON)
 * file, then environment variables. Invalid configuration fails start-up with
 * a message naming every bad key and where its value came from.
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
  /** Path of the config file; none is read when undefined. */
  file?: string;
  /** Write a default file when `file` is absent (the storage service asks for this). */
  writeDefaultFile?: boolean;
  env?: NodeJS.ProcessEnv;
  /** Values applied last, for tests and embedding. */
  overrides?: Record<string, unknown>;
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

function envOverrides(
  opts: LoadConfigOptions<z.ZodType>,
  shape: unknown,
): { tree: Tree; sources: Map<string, string> } {
  const env = opts.env ?? process.env;
  const tree: Tree = {};
  const sources = new Map<string, string>();
  for (const [name, path] of Object.entries(opts.aliases ?? {})) {
    const value = env[name];
    if (value === undefined || value === '') continue;
    setPath(tree, shape, path.split('.'), value);
    sources.set(path, `environment variable ${name}`);
  }
  const prefix = `${opts.envPrefix}__`;
  for (const [name, value] of Object.entries(env)) {
    if (!name.startsWith(prefix) || value === undefined) continue;
    const segments = name.slice(prefix.length).split('__').filter(Boolean);
    if (segments.length === 0) continue;
    setPath(tree, shape, segments, value);
    sources.set(segments.map((s) => s.toLowerCase()).join('.'), `environment variable ${name}`);
  }
  return { tree, sources };
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

/** Loads, validates and returns the configuration; `instance_id` is generated when empty. */
export function loadConfig<S extends z.ZodType>(opts: LoadConfigOptions<S>): z.output<S> {
  const defaults = opts.schema.parse({}) as Tree;
  let fromFile: Tree = {};
  if (opts.file) {
    if (existsSync(opts.file)) {
      fromFile = readFile(opts.file);
    } else if (opts.writeDefaultFile) {
      mkdirSync(dirname(opts.file), { recursive: true });
      writeFileSync(opts.file, `# default configuration, written at first start\n${YAML.stringify(defaults)}`);
    }
  }
  const { tree: fromEnv, sources } = envOverrides(opts as LoadConfigOptions<z.ZodType>, defaults);
  const merged = deepMerge(deepMerge(deepMerge(defaults, fromFile), fromEnv), opts.overrides ?? {});
  const result = opts.schema.safeParse(merged);
  if (!result.success) {
    const lines = result.error.issues.map((issue) => {
      const key = issue.path.join('.');
      const source = sources.get(key.toLowerCase()) ?? (opts.file ? `file ${opts.file} or default` : 'default');
      return `  ${key || '(root)'}: ${issue.message} (from ${source})`;
    });
    throw new ConfigError(`invalid configuration:\n${lines.join('\n')}`);
  }
  const config = result.data as Tree;
  if ('instance_id' in config && !config.instance_id) config.instance_id = randomUUID();
  return config as z.output<S>;
}
