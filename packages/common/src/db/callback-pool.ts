/**
 * The `pg` pool as Kysely's `PostgresPool`, with every query sent through
 * `pg`'s callback API.
 *
 * Why: the promise `pg` returns from `client.query(sql, params)` kept each
 * result (every row and field string) reachable past the next young-generation
 * GC, so results were promoted to the old generation wholesale. On the
 * registry's discovery pages (100 providers rendered as ~300 KB of JSON text)
 * that made every scavenge copy megabytes (6-16 ms pauses, several a second)
 * and forced a full mark-compact every few seconds: the one-client latency
 * tail. The same query through the callback API, wrapped in a plain promise
 * here, leaves its result to die young (scavenges of 2-3 ms, a mark-compact
 * every several seconds: `--trace-gc`, one client, 100-provider pages).
 * Cursors (streamed queries) are passed through untouched.
 *
 * A statement whose text starts with `PREPARED` (a comment) is sent as a named prepared statement: PostgreSQL parses
 * and plans it once per connection and then runs the stored plan, where an unnamed statement is parsed and planned on
 * every execution. For the hot batch statements (a heartbeat group commit's, 50 to 1,000 rows) parsing and planning
 * cost as much as the rows: at 50 rows a batch, PostgreSQL's CPU per row halved. Only for statements whose text does
 * not vary with their data (every value a parameter); each distinct text gets its own name, at most
 * `MAX_PREPARED` of them (any more are sent unnamed), so a statement that did vary cannot fill the server's memory.
 */
import { type PostgresCursor, type PostgresPool, type PostgresPoolClient, type PostgresQueryResult, sql } from 'kysely';
import type pg from 'pg';

/** The comment that opens the text of a statement to send as a named prepared statement. */
export const PREPARED = '/* prepared */';

/** `PREPARED` for a `sql` template: the template's first interpolation, before any whitespace. */
export const PREPARED_SQL = sql.raw(PREPARED);

/** The most distinct prepared texts a process names. */
const MAX_PREPARED = 64;

const preparedNames = new Map<string, string>();

/** The statement's name when its text asks to be prepared (and the process has names left), else undefined. */
function preparedName(text: string): string | undefined {
  if (!text.startsWith(PREPARED)) return undefined;
  let name = preparedNames.get(text);
  if (name === undefined && preparedNames.size < MAX_PREPARED) {
    name = `prepared_${preparedNames.size + 1}`;
    preparedNames.set(text, name);
  }
  return name;
}

export function callbackPool(pool: pg.Pool): PostgresPool {
  // One adapter per pg client, so Kysely's per-client connection cache keeps working.
  const adapters = new WeakMap<pg.PoolClient, PostgresPoolClient>();
  const adapt = (client: pg.PoolClient): PostgresPoolClient => {
    let adapter = adapters.get(client);
    if (!adapter) {
      adapter = {
        query: ((sqlOrCursor: string | PostgresCursor<unknown>, parameters?: readonly unknown[]) => {
          if (typeof sqlOrCursor !== 'string') return client.query(sqlOrCursor as never);
          return new Promise<PostgresQueryResult<unknown>>((resolve, reject) => {
            const done = (err: Error | null, result: pg.QueryResult) => {
              if (err) reject(err);
              else resolve(result as unknown as PostgresQueryResult<unknown>);
            };
            const name = preparedName(sqlOrCursor);
            if (name === undefined) client.query(sqlOrCursor, parameters as unknown[], done);
            else client.query({ name, text: sqlOrCursor, values: parameters as unknown[] }, done);
          });
        }) as PostgresPoolClient['query'],
        release: () => client.release(),
      };
      adapters.set(client, adapter);
    }
    return adapter;
  };
  return {
    connect: async () => adapt(await pool.connect()),
    end: () => pool.end(),
  };
}
