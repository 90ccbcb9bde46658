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
 */
import type { PostgresCursor, PostgresPool, PostgresPoolClient, PostgresQueryResult } from 'kysely';
import type pg from 'pg';

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
            client.query(sqlOrCursor, parameters as unknown[], (err: Error | null, result: pg.QueryResult) => {
              if (err) reject(err);
              else resolve(result as unknown as PostgresQueryResult<unknown>);
            });
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
