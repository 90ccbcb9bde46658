/**
 * What a metric reads from the database when Prometheus scrapes, bounded: each read runs in a transaction of its own
 * whose statements may take `METRIC_READ_LIMIT_MS` at most (PostgreSQL's `statement_timeout`, a wait for a lock
 * included). A table held by a long lock (a migration, an operator's VACUUM FULL) then costs a scrape that gauge, not
 * a pool connection per gauge per scrape until the lock goes: the requests the service serves keep their connections.
 * A read that fails or runs out is logged and counted (`metric_reads_failed_total{metric}`: an alert sees a gauge gone
 * stale), and its gauge keeps the value it had.
 *
 *   databaseGauge({ name: 'billing_sessions_running', help, db, logger,
 *                   query: sql`SELECT count(*) AS n FROM rental_sessions WHERE ...` })
 */
import { type Kysely, type RawBuilder, sql, type Transaction } from 'kysely';
import type { Logger } from 'pino';
import { Counter, Gauge } from 'prom-client';

/** How long one metric's read may take in the database. */
const METRIC_READ_LIMIT_MS = 2000;

/**
 * `metric_reads_failed_total{metric}`: the reads of a gauge from the database that failed or ran out, in this
 * process. Every app's registry has it (http/metrics.ts); an increase means the gauge named shows an old value.
 */
export const metricReadFailures = new Counter({
  name: 'metric_reads_failed_total',
  help: "reads of a gauge's value from the database that failed or ran out of time (the gauge kept its last value)",
  labelNames: ['metric'] as const,
  registers: [],
  // A scrape collects every metric at once: this one waits for the reads under way, so that it counts this scrape's.
  async collect() {
    // The others' collects start in the same turn (each begins its read at once): then wait for those reads.
    await new Promise((r) => setImmediate(r));
    await Promise.allSettled([...reading]);
  },
});

/** The bounded reads under way (each settles within the limit). */
const reading = new Set<Promise<unknown>>();

/**
 * Starts `metric`'s failure count at 0 (call it where the gauge is made): a rule's `increase()` needs a sample before
 * the first failure to see it.
 */
export function countReadFailures(metric: string): void {
  metricReadFailures.inc({ metric }, 0);
}

/** A gauge's read that failed: logged and counted; the gauge keeps its value. */
export function metricReadFailed(logger: Logger, metric: string, err: unknown): void {
  metricReadFailures.inc({ metric });
  logger.warn({ err: (err as Error).message, metric }, 'reading a metric failed');
}

/** Runs `read` in a transaction whose statements time out after `limitMs`. */
export async function boundedRead<DB, T>(
  db: Kysely<DB>,
  read: (trx: Transaction<DB>) => Promise<T>,
  limitMs = METRIC_READ_LIMIT_MS,
): Promise<T> {
  const done = db.transaction().execute(async (trx) => {
    await sql`SELECT set_config('statement_timeout', ${String(limitMs)}, true)`.execute(trx);
    return read(trx);
  });
  // Until its gauge has handled the outcome too (a failure counted after this settles is still this scrape's).
  const handled = done.then(
    () => new Promise((r) => setImmediate(r)),
    () => new Promise((r) => setImmediate(r)),
  );
  reading.add(handled);
  void handled.finally(() => reading.delete(handled));
  return done;
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
  countReadFailures(name);
  return new Gauge({
    name,
    help: opts.help,
    registers: [],
    async collect() {
      try {
        this.set(Number((await boundedRead(db, (trx) => query.execute(trx))).rows[0]?.n ?? 0));
      } catch (err) {
        metricReadFailed(logger, name, err);
      }
    },
  });
}
