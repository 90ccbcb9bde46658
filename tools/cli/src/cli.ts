/**
 * What every command of `gpu` shares: who it acts as and where (the clients, with the caller's token), how it prints
 * (a table, or the platform's answer as JSON), and how it parses what it is given (a usage error is exit status 2).
 */
import { randomUUID } from 'node:crypto';
import { authClient, billingClient, objectStore, registryClient } from '@gpu/client';
import Table from 'cli-table3';
import { type Command, InvalidArgumentError } from 'commander';
import { type CliConfig, readConfig } from './config.ts';
import { printable } from './format.ts';
import { platformUrl } from './platform-url.ts';
import { tokenSource } from './session.ts';

export interface Globals {
  url?: string;
  json?: boolean;
}

/** A usage error: one line on standard error, exit status 2. */
export class UsageError extends Error {}

/** Whether two URLs are of one origin (scheme, host and port); false when either is not a URL. */
function sameOrigin(a: string, b: string | undefined): boolean {
  try {
    return b !== undefined && new URL(a).origin === new URL(b).origin;
  } catch {
    return false;
  }
}

/** Everything a command needs: the URL, the saved configuration, the clients with the caller's token. */
export function context(program: Command) {
  const globals = program.opts<Globals>();
  const env = process.env;
  const saved = readConfig(env);
  const { url } = platformUrl(globals.url, env, saved.url);
  // The saved sign-in and API key go to the platform they were saved for, never to one a run names instead (--url,
  // GPU_URL: a hostile one would get them): elsewhere the run acts as nobody unless GPU_TOKEN or GPU_API_KEY says.
  const elsewhere = !sameOrigin(url, saved.url) && Boolean(saved.api_key || saved.refresh_token);
  const config: CliConfig = elsewhere ? { ...saved, api_key: undefined, refresh_token: undefined } : saved;
  const token = tokenSource(url, env, config, elsewhere ? saved.url : undefined);
  return {
    url,
    env,
    config,
    /** The platform the saved sign-in is for, when it is another than this run's (its credentials kept from it). */
    signedInElsewhere: elsewhere ? saved.url : undefined,
    json: globals.json === true,
    /** The caller's bearer token (the streams of `exec` and `shell` carry it). */
    token,
    auth: authClient({ baseUrl: url, token }),
    registry: registryClient({ baseUrl: url, token }),
    billing: billingClient({ baseUrl: url, token }),
    objects: objectStore({ baseUrl: url, token }),
  };
}

export type Context = ReturnType<typeof context>;

type Cell = string | number | boolean | null | undefined;

/** Prints `rows` as a table (no colour), or `data` as JSON with --json. */
export function show(json: boolean, data: unknown, head: string[], rows: Cell[][]) {
  if (json) {
    printJson(data);
    return;
  }
  const table = new Table({ head, style: { head: [], border: [] } });
  for (const row of rows) table.push(row.map((v) => (v === null || v === undefined ? '' : printable(String(v)))));
  process.stdout.write(`${table.toString()}\n`);
}

/** One record as a two-column table of its fields (or JSON with --json). */
export function showRecord(json: boolean, data: unknown, fields: [string, Cell][]) {
  show(json, data, ['field', 'value'], fields);
}

export function printJson(data: unknown) {
  process.stdout.write(`${JSON.stringify(data, null, 2)}\n`);
}

/** A whole number option, or a usage error naming it. */
export function count(name: string, max = Number.MAX_SAFE_INTEGER) {
  return (value: string) => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < 1 || n > max) {
      throw new InvalidArgumentError(
        `${name} takes a whole number of at least 1${max < Number.MAX_SAFE_INTEGER ? ` and at most ${max}` : ''}`,
      );
    }
    return n;
  };
}

/** Billing's form of a token amount: a decimal string, never a JS number (no sign, exponent or leading zeros). */
export const DECIMAL = /^(0|[1-9]\d{0,29})(\.\d+)?$/;

/** A token amount option, kept as the string it is; a usage error for anything billing would not read as one. */
export function amount(name: string) {
  return (value: string) => {
    if (!DECIMAL.test(value)) throw new InvalidArgumentError(`${name} takes a decimal amount such as 12.5`);
    return value;
  };
}

/** A reliability score option (0-1, as written: `0.95`), kept as the string it is. */
export function reliabilityScore(value: string): string {
  const n = Number(value);
  if (!/^(0|1|0?\.\d+|1\.0+)$/.test(value) || !(n >= 0 && n <= 1)) {
    throw new InvalidArgumentError('a score from 0 to 1, e.g. 0.95');
  }
  return value;
}

const SIZE_UNITS: Record<string, number> = {
  '': 1,
  m: 1,
  mb: 1,
  mib: 1,
  g: 1024,
  gb: 1024,
  gib: 1024,
  t: 1024 ** 2,
  tb: 1024 ** 2,
  tib: 1024 ** 2,
};

/**
 * A size option in MB, as the platform counts sizes: `81920`, `40960MB`, `80GB`, `2TB` (GB of 1024 MB, as drivers and
 * billing count them: a card sold as 80 GB reports 79.6 GB, so `--min-vram 79GB` finds it and `80GB` does not).
 */
export function megabytes(name: string) {
  return (value: string) => {
    const m = /^(\d+(?:\.\d+)?)\s*([a-z]*)$/i.exec(value.trim());
    const unit = m ? SIZE_UNITS[m[2]!.toLowerCase()] : undefined;
    const mb = m && unit ? Math.ceil(Number(m[1]) * unit) : Number.NaN;
    if (!(mb >= 1 && Number.isSafeInteger(mb))) {
      throw new InvalidArgumentError(`${name} takes a size: MB (40960, 40960MB), GB (80GB) or TB (2TB)`);
    }
    return mb;
  };
}

/** A version option as dotted numbers (`550.54`, `8.6`), compared part by part by the platform. */
export function dottedVersion(name: string) {
  return (value: string) => {
    if (!/^\d{1,9}(?:\.\d{1,9})*$/.test(value)) {
      throw new InvalidArgumentError(`${name} takes dotted numbers such as 550.54 or 8.6`);
    }
    return value;
  };
}

/**
 * A moment option: a date (`2026-11-01`, its start in UTC) or an RFC 3339 time with its offset
 * (`2026-11-01T12:00:00Z`), from 1970 to 2100 as the platform takes them; kept as RFC 3339.
 */
export function moment(name: string) {
  return (value: string) => {
    const at = /^\d{4}-\d{2}-\d{2}$/.test(value) ? `${value}T00:00:00Z` : value;
    const m = /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))$/.exec(at);
    const ms = Date.parse(at);
    // Each field within its range, the day within its month (JavaScript would read 2026-02-30 as March 2nd).
    const [year, month, day, hour, minute, second, offsetHours, offsetMinutes] = [1, 2, 3, 4, 5, 6, 9, 10].map((i) =>
      Number(m?.[i] ?? 0),
    );
    const real =
      m !== null &&
      !Number.isNaN(ms) &&
      month! >= 1 &&
      day! >= 1 &&
      day! <= new Date(Date.UTC(year!, month!, 0)).getUTCDate() &&
      hour! <= 23 &&
      minute! <= 59 &&
      second! <= 59 &&
      offsetHours! <= 23 &&
      offsetMinutes! <= 59;
    if (!real || ms < 0 || ms >= Date.UTC(2100, 0, 1)) {
      throw new InvalidArgumentError(
        `${name} takes a date (2026-11-01) or a time with its offset (2026-11-01T12:00:00Z)`,
      );
    }
    return new Date(ms).toISOString();
  };
}

/** A repeatable option's values, in order. */
export function collect(value: string, previous: string[] = []): string[] {
  return [...previous, value];
}

/** A comma-separated list of `choices` (`completed,terminated`), each checked: the values, in order. */
export function listOf(choices: readonly string[]) {
  return (value: string): string[] => {
    const values = value.split(',').map((v) => v.trim());
    const bad = values.find((v) => !choices.includes(v));
    if (bad !== undefined) throw new InvalidArgumentError(`${bad} is not one of ${choices.join(', ')}`);
    return values;
  };
}

/** A repeatable option whose values are among `choices`, in order; a usage error for another. */
export function oneOf(choices: readonly string[]) {
  return (value: string, previous: string[] = []) => {
    if (!choices.includes(value)) throw new InvalidArgumentError(`one of ${choices.join(', ')}`);
    return [...previous, value];
  };
}

/**
 * A key that makes a money-moving request safe to repeat (the client retries a POST only with one): the caller's, so
 * that a run cut short can be repeated with the same key and have the platform answer the first request's answer,
 * else a new one for this run.
 */
export function idempotencyKey(prefix: string, given?: string): string {
  return given ?? `${prefix}:${randomUUID()}`;
}

/** Ends the run with this exit status and nothing more printed (a workload's own exit status, for one). */
export class ExitStatus extends Error {
  constructor(readonly status: number) {
    super(`exit status ${status}`);
  }
}
