/**
 * What a metric reads from the database when Prometheus scrapes, bounded: each read runs in a transaction of its own
 * whose statements may take `METRIC_READ_LIMIT_MS` at most (PostgreSQL's `statement_timeout`, a wait for a lock
 * included). A table held by a long lock (a migration, an operator's VACUUM FULL) then costs a scrape that gauge, not
 * a pool connection per gauge per scrape until the lock goes: the requests the service serves keep their connections.
 * A read that fails or runs out is logged, and its gauge keeps the value it had.
 *
 *   databaseGauge({ name: 'billing_sessions_running', help, db, logger,
 *                   query: sql`SELECT count(*) AS n FROM rental_sessions WHERE ...` })
 */
import { type Kysely, type RawBuilder, sql, type Transaction } from 'kysely';
import type { Logger } from 'pino';
import { Gauge } from 'prom-client';

/** How long one metric's read may take in the database. */
const METRIC_READ_LIMIT_MS = 2000;

/** Runs `read` in a transaction whose statements time out after `limitMs`. */
export async function boundedRead<DB, T>(
  db: Kysely<DB>,
  read: (trx: Transaction<DB>) => Promise<T>,
  limitMs = METRIC_READ_LIMIT_MS,
): Promise<T> {
  return db.transaction().execute(async (trx) => {
    await sql`SELECT set_config('statement_timeout', ${String(limitMs)}, true)`.execute(trx);
    return read(trx);
  });
}

/** A gauge set at each scrape to the number `query` answers (its row's `n`; 0 without a row or with NULL). */
export function databaseGauge<DB>(opts: {
  name: string;
  help: string;
  db: Kysely<DB>;
  logger: Logger;
  query: RawBuilder<{ n: string | number | null }>;
}): Gauge {
  const { name, db, logger, query } = opts;
  return new Gauge({
    name,
    help: opts.help,
    registers: [],
    async collect() {
      try {
        this.set(Number((await boundedRead(db, (trx) => query.execute(trx))).rows[0]?.n ?? 0));
      } catch (err) {
        logger.warn({ err: (err as Error).message, metric: name }, 'reading a metric failed');
      }
    },
  });
}
