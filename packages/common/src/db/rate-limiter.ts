/**
 * Fixed-window rate limits kept in PostgreSQL, so every instance of a service
 * counts against the same windows: behind N instances a client still gets the
 * limit once, not N times. One counter per (rule name, key), e.g.
 * (`login-ip`, `203.0.113.7`). Each check or count is one statement, one round
 * trip; the upsert is atomic, so N concurrent `consume` calls let exactly
 * `max` through. Time is the database's, so instances whose clocks disagree
 * still agree on when a window ends.
 *
 * The table (each service that limits creates it in a migration of its own;
 * UNLOGGED: counters are cheap to write and may be lost in a crash):
 *
 *   CREATE UNLOGGED TABLE rate_limits (
 *     name text NOT NULL, key text NOT NULL, count integer NOT NULL, reset_at timestamptz NOT NULL,
 *     PRIMARY KEY (name, key));
 *   CREATE INDEX rate_limits_reset_at ON rate_limits (reset_at);
 *
 * Rows of ended windows are deleted lazily: every `purgeEvery` counts made by
 * one limiter, one DELETE runs in the background (`purgeExpired()` does it on demand).
 */
import { type ColumnType, type Kysely, sql, type Transaction } from 'kysely';
import { errors } from '../errors.ts';

/** A rate limit: at most `max` events per `windowMs`. */
export interface RateRule {
  max: number;
  windowMs: number;
}

/** Kysely type of the table; a service's database type includes `rate_limits: RateLimitTable`. */
export interface RateLimitTable {
  name: string;
  key: string;
  count: number;
  reset_at: ColumnType<Date, Date | string, Date | string>;
}

export interface RateLimitDatabase {
  rate_limits: RateLimitTable;
}

/** Where a statement runs: the service database, or a transaction (the count then commits or rolls back with it). */
// biome-ignore lint/suspicious/noExplicitAny: any service database that has the rate_limits table
export type RateLimitExecutor = Kysely<any> | Transaction<any>;

export interface RateLimiterOptions {
  /** false: every call returns at once and nothing is counted (`rate_limit.enabled=false`). Default true. */
  enabled?: boolean;
  /** Counts between two background purges of ended windows. Default 1000. */
  purgeEvery?: number;
  /** Told when a background purge fails (the next one retries); ignored by default. */
  onPurgeError?: (err: unknown) => void;
}

interface WindowRow {
  count: number;
  /** Milliseconds until the window ends. */
  retry_ms: number;
}

const DEFAULT_PURGE_EVERY = 1000;

/** Whole seconds to wait before retrying, at least 1 (the Retry-After header). */
const retryAfterSeconds = (retryMs: number) => Math.max(1, Math.ceil(retryMs / 1000));

/**
 * Rate limits shared by every instance over one database. `check` refuses when
 * the window is used up, `hit` counts, `consume` counts and refuses past the
 * limit; a refusal is `errors.rateLimited(seconds)` (429 with Retry-After).
 */
export class RateLimiter {
  private readonly enabled: boolean;
  private readonly purgeEvery: number;
  private readonly onPurgeError: (err: unknown) => void;
  private countsSincePurge = 0;

  constructor(
    private readonly db: RateLimitExecutor,
    opts: RateLimiterOptions = {},
  ) {
    this.enabled = opts.enabled ?? true;
    this.purgeEvery = opts.purgeEvery ?? DEFAULT_PURGE_EVERY;
    this.onPurgeError = opts.onPurgeError ?? (() => {});
  }

  /** Refuses (429 with Retry-After) when the key already used up its window; counts nothing. */
  async check(rule: RateRule, name: string, key: string, on: RateLimitExecutor = this.db): Promise<void> {
    if (!this.enabled) return;
    const { rows } = await sql<WindowRow>`
      SELECT count, ceil(extract(epoch FROM reset_at - statement_timestamp()) * 1000)::float8 AS retry_ms
      FROM rate_limits
      WHERE name = ${name} AND key = ${key} AND reset_at > statement_timestamp()`.execute(on);
    const w = rows[0];
    if (w && w.count >= rule.max) throw errors.rateLimited(retryAfterSeconds(w.retry_ms));
  }

  /** Counts one event for the key. */
  async hit(rule: RateRule, name: string, key: string, on: RateLimitExecutor = this.db): Promise<void> {
    if (!this.enabled) return;
    await this.count(rule, name, key, on);
  }

  /** Counts one event and refuses it when it is past the limit: the usual "N attempts per window". */
  async consume(rule: RateRule, name: string, key: string, on: RateLimitExecutor = this.db): Promise<void> {
    if (!this.enabled) return;
    const w = await this.count(rule, name, key, on);
    if (w.count > rule.max) throw errors.rateLimited(retryAfterSeconds(w.retry_ms));
  }

  /** Deletes the rows of ended windows; returns how many. */
  async purgeExpired(): Promise<number> {
    if (!this.enabled) return 0;
    const result = await sql`DELETE FROM rate_limits WHERE reset_at <= statement_timestamp()`.execute(this.db);
    return Number(result.numAffectedRows ?? 0);
  }

  /**
   * The one statement behind `hit` and `consume`: opens a window or counts in the open one. A refused event
   * is not counted (the count stops at max + 1), so a window ends when it was opened to end, however hard
   * it is hammered.
   */
  private async count(rule: RateRule, name: string, key: string, on: RateLimitExecutor): Promise<WindowRow> {
    const { rows } = await sql<WindowRow>`
      INSERT INTO rate_limits AS r (name, key, count, reset_at)
      VALUES (${name}, ${key}, 1, statement_timestamp() + ${rule.windowMs}::float8 * interval '1 millisecond')
      ON CONFLICT (name, key) DO UPDATE SET
        count = CASE WHEN r.reset_at <= statement_timestamp() THEN 1 ELSE least(r.count + 1, ${rule.max + 1}::int) END,
        reset_at = CASE WHEN r.reset_at <= statement_timestamp() THEN excluded.reset_at ELSE r.reset_at END
      RETURNING count, ceil(extract(epoch FROM reset_at - statement_timestamp()) * 1000)::float8 AS retry_ms`.execute(
      on,
    );
    if (++this.countsSincePurge >= this.purgeEvery) {
      this.countsSincePurge = 0;
      this.purgeExpired().catch(this.onPurgeError);
    }
    return rows[0]!;
  }
}
