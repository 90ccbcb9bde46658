/**
 * Sliding-window rate limits kept in PostgreSQL, so every instance of a service
 * counts against the same windows: behind N instances a client still gets the
 * limit once, not N times. One row per (rule name, key), e.g.
 * (`login-ip`, `203.0.113.7`), holding the times of the events counted in the
 * window before now (at most `max` of them): a key is refused while `max` of
 * its events fall within the last `windowMs`, whenever they came, so no span
 * of `windowMs` ever lets more than `max` through (a fixed window let twice
 * `max` through across its edge: `max` at its end, `max` more at the next
 * one's start). Retry-After is the time until the oldest of them leaves the
 * window. Each check or count is one statement, one round trip; the upsert is
 * atomic, so N concurrent `consume` calls let exactly `max` through. A `check`
 * before the event and a `hit` after it (a failed login) cannot be one
 * statement: concurrent attempts at a key with one event to go all pass the
 * check, and their hits, past the limit too, keep the newest `max`, so the key
 * is refused for a whole window from the last of them. Time is the database's,
 * so instances whose clocks disagree still agree on the window.
 *
 * The table (each service that limits creates it in its migrations; UNLOGGED:
 * counts are cheap to write and may be lost in a crash of the database):
 *
 *   CREATE UNLOGGED TABLE rate_limits (
 *     name text NOT NULL, key text NOT NULL, count integer NOT NULL, reset_at timestamptz NOT NULL,
 *     hits timestamptz[] NOT NULL DEFAULT '{}', refused boolean NOT NULL DEFAULT false,
 *     PRIMARY KEY (name, key));
 *   CREATE INDEX rate_limits_reset_at ON rate_limits (reset_at);
 *
 * `hits` are the counted events' times, oldest first; `count` is how many and
 * `reset_at` when the newest leaves the window (the row then holds nothing);
 * `refused` says whether the row's last statement refused its event. A row
 * written by the fixed-window version (no `hits`: `count` events in a window
 * ending at `reset_at`) is read as `count` events at the start of that window,
 * so they leave it when that window ended; while instances of that version
 * still run, each version counts in its own columns and neither sees the
 * other's events on a row the other wrote last.
 *
 * Rows holding nothing are deleted lazily: every `purgeEvery` counts made by
 * one limiter, one DELETE runs in the background (`purgeExpired()` does it on demand).
 */
import { type ColumnType, type Kysely, type RawBuilder, sql, type Transaction } from 'kysely';
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
  hits: ColumnType<Date[], Date[] | undefined, Date[]>;
  refused: ColumnType<boolean, boolean | undefined, boolean>;
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
  /** Whether the key had used up its window before the event: `consume` refuses it (and does not count it). */
  refused: boolean;
  /** Milliseconds until the oldest event that fills the window leaves it. */
  retry_ms: number;
}

const DEFAULT_PURGE_EVERY = 1000;

/** A rule as the statements take it: at least one event in a window of some time (a bad one is the caller's bug). */
function checked(rule: RateRule): RateRule {
  if (!Number.isInteger(rule.max) || rule.max < 1 || !(rule.windowMs > 0)) {
    throw new Error(`a rate rule needs max >= 1 and a window > 0 ms: ${JSON.stringify(rule)}`);
  }
  return rule;
}

/** A rule's window as an SQL interval (milliseconds as float8: a window past 2^31 ms is no integer overflow). */
const windowOf = (rule: RateRule) => sql`(${rule.windowMs}::float8 * interval '1 millisecond')`;

/**
 * The times of `r`'s events still in the window before now, oldest first: its `hits`, or for a row of the fixed-window
 * version (no hits, `count` events in a window ending at `reset_at`), that many at the start of that window.
 */
function liveHits(rule: RateRule) {
  const window = windowOf(rule);
  return sql`ARRAY(
    SELECT t FROM unnest(CASE WHEN cardinality(r.hits) = 0 AND r.count > 0
        THEN array_fill(r.reset_at - ${window}, ARRAY[least(r.count, ${rule.max}::int)]) ELSE r.hits END) t
    WHERE t > statement_timestamp() - ${window} ORDER BY t)`;
}

/** Milliseconds until the oldest of the newest `max` times of `hits` leaves the window (when they fill it). */
function retryMs(rule: RateRule, hits: RawBuilder<unknown>) {
  return sql`ceil(extract(epoch FROM ${hits}[greatest(1, cardinality(${hits}) - ${rule.max}::int + 1)]
      + ${windowOf(rule)} - statement_timestamp()) * 1000)::float8`;
}

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
    checked(rule);
    const { rows } = await sql<WindowRow>`
      SELECT cardinality(w.live) >= ${rule.max}::int AS refused, ${retryMs(rule, sql`w.live`)} AS retry_ms
      FROM rate_limits r, LATERAL (SELECT ${liveHits(rule)} AS live) w
      WHERE r.name = ${name} AND r.key = ${key}`.execute(on);
    const w = rows[0];
    if (w?.refused) throw errors.rateLimited(retryAfterSeconds(w.retry_ms));
  }

  /**
   * Counts one event that happened (a failure, say) for the key, refusing nothing: past the limit too, when the
   * window keeps its newest `max` events, so that events let through together by a `check` each before its `hit`
   * (concurrent attempts at a key with one event to go) keep the key refused for a whole window from the newest.
   */
  async hit(rule: RateRule, name: string, key: string, on: RateLimitExecutor = this.db): Promise<void> {
    if (!this.enabled) return;
    await this.count(rule, name, key, on, true);
  }

  /** Counts one event and refuses it when it is past the limit: the usual "N attempts per window". */
  async consume(rule: RateRule, name: string, key: string, on: RateLimitExecutor = this.db): Promise<void> {
    if (!this.enabled) return;
    const w = await this.count(rule, name, key, on);
    if (w.refused) throw errors.rateLimited(retryAfterSeconds(w.retry_ms));
  }

  /** Deletes the rows that hold no event of their window any more; returns how many. */
  async purgeExpired(): Promise<number> {
    if (!this.enabled) return 0;
    const result = await sql`DELETE FROM rate_limits WHERE reset_at <= statement_timestamp()`.execute(this.db);
    return Number(result.numAffectedRows ?? 0);
  }

  /**
   * The one statement behind `hit` and `consume`: counts the event, unless `max` events of the key are already in the
   * window before now, which refuses it (`refused`). A refused event is not counted (`consume`: so however hard a key
   * is hammered, it is let through again once its oldest counted event leaves the window), unless it happened all the
   * same (`happened`: `hit`), when the newest `max` are kept. The times are kept in order (a statement that waited for
   * the row's lock may bring a time older than the one before it), so that `reset_at` is when the newest leaves.
   */
  private async count(
    rule: RateRule,
    name: string,
    key: string,
    on: RateLimitExecutor,
    happened = false,
  ): Promise<WindowRow> {
    const window = windowOf(checked(rule));
    const { rows } = await sql<WindowRow>`
      INSERT INTO rate_limits AS r (name, key, count, reset_at, hits, refused)
      VALUES (${name}, ${key}, 1, statement_timestamp() + ${window}, ARRAY[statement_timestamp()], false)
      ON CONFLICT (name, key) DO UPDATE SET (hits, refused, count, reset_at) = (
        SELECT n.hits, w.full, cardinality(n.hits), n.hits[cardinality(n.hits)] + ${window}
        FROM (SELECT l.live, cardinality(l.live) >= ${rule.max}::int AS full FROM (SELECT ${liveHits(rule)} AS live) l) w,
        LATERAL (
          SELECT CASE WHEN w.full AND NOT ${happened}::boolean THEN w.live ELSE ARRAY(
            SELECT t FROM (
              SELECT t FROM unnest(w.live || statement_timestamp()) t ORDER BY t DESC LIMIT ${rule.max}::int) newest
            ORDER BY t) END AS hits
        ) n)
      RETURNING r.refused, ${retryMs(rule, sql`r.hits`)} AS retry_ms`.execute(on);
    if (++this.countsSincePurge >= this.purgeEvery) {
      this.countsSincePurge = 0;
      this.purgeExpired().catch(this.onPurgeError);
    }
    return rows[0]!;
  }
}
