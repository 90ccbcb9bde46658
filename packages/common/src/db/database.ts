/**
 * One way to open a database for every service: PostgreSQL through `pg` when
 * a URL is given, else an embedded PGlite (PostgreSQL in WASM) on a local
 * folder, so `pnpm start` needs no database server. Both speak the same SQL.
 */
import { mkdirSync } from 'node:fs';
import type { Kysely } from 'kysely';
import type pg from 'pg';
import { durationMs } from '../duration.ts';
import { callbackPool } from './callback-pool.ts';
import { seedFromTemplate } from './pglite-template.ts';

export interface Database<DB> {
  db: Kysely<DB>;
  kind: 'postgres' | 'pglite';
  /** Resolves when the database answers a trivial query. */
  ping(): Promise<void>;
  close(): Promise<void>;
}

export interface OpenDatabaseOptions {
  /** postgres:// URL; when empty an embedded PGlite database is opened at `embeddedPath`. */
  url?: string;
  embeddedPath?: string;
  /**
   * A folder for an empty embedded database made once and copied for each new one (`seedFromTemplate`), instead of
   * running initdb for each; empty or absent: every new embedded database is made anew.
   */
  embeddedTemplateDir?: string;
  poolSize?: number;
  /** Milliseconds to wait for a pooled connection before failing (503 upstream). */
  connectTimeoutMs?: number;
  /** PostgreSQL settings for every connection (e.g. `{ jit: 'off' }`); PGlite ignores them. */
  sessionSettings?: Record<string, string>;
}

/** A service's `database` section (common's `databaseShape`), as its configuration holds it. */
export interface DatabaseSection {
  url: string;
  embedded_path: string;
  embedded_template_dir: string;
  pool_size: number;
  connect_timeout: string;
}

/** `openDatabase`'s options from a service's `database` section, with what the service sets beyond it. */
export function databaseOptions(
  section: DatabaseSection,
  overrides: Partial<OpenDatabaseOptions> = {},
): OpenDatabaseOptions {
  return {
    url: section.url,
    embeddedPath: section.embedded_path,
    embeddedTemplateDir: section.embedded_template_dir,
    poolSize: section.pool_size,
    connectTimeoutMs: durationMs(section.connect_timeout),
    ...overrides,
  };
}

/** `-c name=value` startup options; spaces and backslashes in values are escaped as libpq expects. */
const startupOptions = (settings: Record<string, string>) =>
  Object.entries(settings)
    .map(([name, value]) => `-c ${name}=${value.replace(/[\\ ]/g, (c) => `\\${c}`)}`)
    .join(' ');

const INT8_OID = 20;
const TIMESTAMPTZ_OID = 1184;

/**
 * `parse` remembering the last text it read: the same text again (every row of a batch write that returns its
 * `now()`, thousands a statement in the registry's heartbeats) costs a string comparison and a new Date, not another
 * parse (~0.5 µs each). A new Date each time: a caller may change the one it was given.
 */
function lastTextParser(parse: (text: string) => unknown): (text: string) => unknown {
  let lastText: string | undefined;
  let last: unknown;
  return (text) => {
    if (text !== lastText) {
      last = parse(text);
      lastText = text;
    }
    return last instanceof Date ? new Date(last.getTime()) : last;
  };
}

/**
 * BIGINT (e.g. `count(*)`) comes back as a JS number from both drivers: PGlite
 * does so already, `pg` is told to here. NUMERIC stays a string (exact money).
 * TIMESTAMPTZ is `pg`'s Date, read through `lastTextParser`.
 */
function typeParserFor(types: typeof pg.types) {
  const timestamptz = lastTextParser(types.getTypeParser(TIMESTAMPTZ_OID, 'text'));
  return (oid: number, format?: 'text' | 'binary') => {
    if (oid === INT8_OID) return (v: string) => Number(v);
    if (oid === TIMESTAMPTZ_OID && format !== 'binary') return timestamptz;
    return format === undefined ? types.getTypeParser(oid) : types.getTypeParser(oid, format);
  };
}

/**
 * Opens the database. Kysely and the drivers load here, on first use, so a
 * service without a database (storage) never pays for them.
 */
export async function openDatabase<DB>(opts: OpenDatabaseOptions): Promise<Database<DB>> {
  const { Kysely, PostgresDialect, sql } = await import('kysely');
  if (opts.url) {
    const { default: pg } = await import('pg');
    const pool = new pg.Pool({
      connectionString: opts.url,
      max: opts.poolSize ?? 10,
      connectionTimeoutMillis: opts.connectTimeoutMs ?? 5000,
      ...(opts.sessionSettings ? { options: startupOptions(opts.sessionSettings) } : {}),
      types: { getTypeParser: typeParserFor(pg.types) as typeof pg.types.getTypeParser },
    });
    // An idle client losing its server must not crash the process; the next query reconnects.
    pool.on('error', () => {});
    // Nor may a checked-out one (the server stopping mid-query): its query already fails with the
    // error, and the pool discards the broken client when it is released.
    pool.on('connect', (client) => client.on('error', () => {}));
    const db = new Kysely<DB>({ dialect: new PostgresDialect({ pool: callbackPool(pool) }) });
    return {
      db,
      kind: 'postgres',
      ping: async () => {
        await sql`select 1`.execute(db);
      },
      close: () => db.destroy(),
    };
  }
  const { PGlite } = await import('@electric-sql/pglite');
  const { PGliteDialect } = await import('kysely-pglite-dialect');
  if (opts.embeddedPath && opts.embeddedTemplateDir)
    await seedFromTemplate(opts.embeddedPath, opts.embeddedTemplateDir, PGlite);
  if (opts.embeddedPath) mkdirSync(opts.embeddedPath, { recursive: true });
  const lite = new PGlite(opts.embeddedPath);
  await lite.waitReady;
  const db = new Kysely<DB>({ dialect: new PGliteDialect(lite) });
  return {
    db,
    kind: 'pglite',
    ping: async () => {
      await sql`select 1`.execute(db);
    },
    close: () => db.destroy(),
  };
}
