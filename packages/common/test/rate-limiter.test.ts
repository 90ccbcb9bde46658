import { randomBytes } from 'node:crypto';
import { type Kysely, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AppError, type Database, openDatabase, type RateLimitDatabase, RateLimiter } from '../src/index.ts';
import { createTestDatabase, type TestDatabase } from '../src/testing/index.ts';

let testDb: TestDatabase;
let database: Database<RateLimitDatabase>;
let db: Kysely<RateLimitDatabase>;

beforeAll(async () => {
  testDb = await createTestDatabase('common_rate_limits');
  database = await openDatabase<RateLimitDatabase>({ url: testDb.url, poolSize: 20 });
  db = database.db;
  await sql`CREATE UNLOGGED TABLE rate_limits (
    name text NOT NULL, key text NOT NULL, count integer NOT NULL, reset_at timestamptz NOT NULL,
    hits timestamptz[] NOT NULL DEFAULT '{}', refused boolean NOT NULL DEFAULT false,
    PRIMARY KEY (name, key))`.execute(db);
  await sql`CREATE INDEX rate_limits_reset_at ON rate_limits (reset_at)`.execute(db);
});

afterAll(async () => {
  await database?.close();
  await testDb?.drop();
});

const key = () => randomBytes(6).toString('hex');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The refusal a call ended with, or undefined when it went through. */
async function refusal(call: Promise<void>): Promise<AppError | undefined> {
  try {
    await call;
    return undefined;
  } catch (err) {
    if (err instanceof AppError) return err;
    throw err;
  }
}

describe('RateLimiter (PostgreSQL)', () => {
  it('lets max events through per window and refuses the next with a Retry-After', async () => {
    const limiter = new RateLimiter(db);
    const rule = { max: 3, windowMs: 60_000 };
    const k = key();
    for (let i = 0; i < 3; i++) await limiter.consume(rule, 'test', k);
    const err = await refusal(limiter.consume(rule, 'test', k));
    expect(err?.kind).toBe('rate_limited');
    expect(err?.code).toBe('RATE_LIMITED');
    const retryAfter = Number(err?.headers?.['retry-after']);
    expect(retryAfter).toBeGreaterThan(0);
    expect(retryAfter).toBeLessThanOrEqual(60);
    // Another key and another rule name count on their own.
    await limiter.consume(rule, 'test', key());
    await limiter.consume(rule, 'other', k);
  });

  it('takes a window of 30 days (past 2^31 ms): refuses with a Retry-After of as many seconds, never a 500', async () => {
    const limiter = new RateLimiter(db);
    const rule = { max: 1, windowMs: 30 * 86_400_000 };
    const k = key();
    await limiter.consume(rule, 'month', k);
    // One after the other: a refusal awaited only once the other settled would reject unhandled meanwhile.
    for (const refused of [() => limiter.consume(rule, 'month', k), () => limiter.check(rule, 'month', k)]) {
      const err = await refusal(refused());
      expect(err?.code).toBe('RATE_LIMITED');
      const retryAfter = Number(err?.headers?.['retry-after']);
      expect(retryAfter).toBeGreaterThan(30 * 86_400 - 60);
      expect(retryAfter).toBeLessThanOrEqual(30 * 86_400);
    }
  });

  it('check refuses a used-up window without counting; hit counts without refusing', async () => {
    const limiter = new RateLimiter(db);
    const rule = { max: 2, windowMs: 60_000 };
    const k = key();
    await limiter.check(rule, 'failures', k);
    await limiter.hit(rule, 'failures', k);
    await limiter.check(rule, 'failures', k);
    await limiter.hit(rule, 'failures', k);
    await limiter.hit(rule, 'failures', k);
    expect((await refusal(limiter.check(rule, 'failures', k)))?.code).toBe('RATE_LIMITED');
    // The third happened past the limit: the window keeps the newest two, the third the last of them.
    const row = await db
      .selectFrom('rate_limits')
      .select(['count', 'hits'])
      .where('key', '=', k)
      .executeTakeFirstOrThrow();
    expect(row.count).toBe(2);
    expect(row.hits).toHaveLength(2);
    expect(row.hits[0]!.getTime()).toBeLessThanOrEqual(row.hits[1]!.getTime());
  });

  /** A key's row as if its events had come `agoSeconds` before now (oldest first). */
  async function plant(name: string, k: string, agoSeconds: number[], windowMs: number) {
    const hits = sql`ARRAY(SELECT statement_timestamp() - s * interval '1 second'
      FROM unnest(${`{${agoSeconds.join(',')}}`}::float8[]) s ORDER BY 1)`;
    await sql`INSERT INTO rate_limits (name, key, count, reset_at, hits)
      VALUES (${name}, ${k}, ${agoSeconds.length},
        statement_timestamp() + ${windowMs}::float8 * interval '1 millisecond', ${hits})`.execute(db);
  }
  const retryAfter = (err: AppError | undefined) => Number(err?.headers?.['retry-after']);
  /**
   * Retry-After says `seconds` counted from `since` (when the test set the key's events up): no more, and no less
   * than the whole seconds that have passed since allow (a busy machine may take a while between the two).
   */
  const expectRetryAfter = (err: AppError | undefined, seconds: number, since: number) => {
    expect(retryAfter(err)).toBeLessThanOrEqual(seconds);
    expect(retryAfter(err)).toBeGreaterThanOrEqual(seconds - 1 - Math.floor((Date.now() - since) / 1000));
  };

  it('counts the window before each event, not a fixed one: no span of the window lets more than max through', async () => {
    const limiter = new RateLimiter(db);
    const rule = { max: 2, windowMs: 60_000 };
    // Two events 50 and 10 s ago: both in the minute before now. (A fixed window opened by the first would have ended
    // 50 s after it, letting two more through 10 s from now: four within 20 s.)
    const full = key();
    let set = Date.now();
    await plant('sliding', full, [50, 10], rule.windowMs);
    for (const refused of [() => limiter.consume(rule, 'sliding', full), () => limiter.check(rule, 'sliding', full)]) {
      const err = await refusal(refused());
      expect(err?.code).toBe('RATE_LIMITED');
      // Until the one of 50 s ago leaves the window.
      expectRetryAfter(err, 10, set);
    }

    // One of them 61 s ago, out of the window: one more goes through, then the key waits for the one of 10 s ago.
    const freed = key();
    set = Date.now();
    await plant('sliding', freed, [61, 10], rule.windowMs);
    await limiter.check(rule, 'sliding', freed);
    await limiter.consume(rule, 'sliding', freed);
    const err = await refusal(limiter.consume(rule, 'sliding', freed));
    expect(err?.code).toBe('RATE_LIMITED');
    expectRetryAfter(err, 50, set);
    const row = await db
      .selectFrom('rate_limits')
      .select(['count', 'hits', 'reset_at'])
      .where('name', '=', 'sliding')
      .where('key', '=', freed)
      .executeTakeFirstOrThrow();
    // The expired one dropped, the new one kept; the row holds something until the newest leaves the window.
    expect(row.count).toBe(2);
    expect(row.hits).toHaveLength(2);
    expect(row.reset_at.getTime() - row.hits[1]!.getTime()).toBe(rule.windowMs);
  });

  it('keeps a key refused a whole window after attempts that all passed its check at once', async () => {
    const limiter = new RateLimiter(db);
    const rule = { max: 2, windowMs: 60_000 };
    // One failure 50 s ago: one to go. Three attempts check at once, all pass, all fail.
    const k = key();
    const set = Date.now();
    await plant('raced', k, [50], rule.windowMs);
    await Promise.all([0, 1, 2].map(() => limiter.check(rule, 'raced', k)));
    await Promise.all([0, 1, 2].map(() => limiter.hit(rule, 'raced', k)));
    // Refused until the newest two leave the window, a minute from now; not again in 10 s, when the one of 50 s ago
    // leaves (the next three would pass then, and three more each time one left).
    const err = await refusal(limiter.check(rule, 'raced', k));
    expect(err?.code).toBe('RATE_LIMITED');
    expectRetryAfter(err, 60, set);
  });

  it('takes no rule that lets nothing through, or in no time', async () => {
    const limiter = new RateLimiter(db);
    for (const rule of [
      { max: 0, windowMs: 60_000 },
      { max: 1.5, windowMs: 60_000 },
      { max: 1, windowMs: 0 },
    ]) {
      await expect(limiter.consume(rule, 'bad', key())).rejects.toThrow(/a rate rule needs/);
      await expect(limiter.check(rule, 'bad', key())).rejects.toThrow(/a rate rule needs/);
    }
  });

  it("reads a row of the fixed-window version as its events at its window's start", async () => {
    const limiter = new RateLimiter(db);
    const rule = { max: 3, windowMs: 60_000 };
    // Three events in a window that ends in 30 s: refused until then.
    const open = key();
    const set = Date.now();
    await sql`INSERT INTO rate_limits (name, key, count, reset_at)
      VALUES ('legacy', ${open}, 3, statement_timestamp() + interval '30 seconds')`.execute(db);
    const err = await refusal(limiter.consume(rule, 'legacy', open));
    expect(err?.code).toBe('RATE_LIMITED');
    expectRetryAfter(err, 30, set);
    // A window that ended holds nothing: the limit is whole again.
    const ended = key();
    await sql`INSERT INTO rate_limits (name, key, count, reset_at)
      VALUES ('legacy', ${ended}, 3, statement_timestamp() - interval '1 second')`.execute(db);
    for (let i = 0; i < 3; i++) await limiter.consume(rule, 'legacy', ended);
    expect(await refusal(limiter.consume(rule, 'legacy', ended))).toBeDefined();
  });

  it('lets a key through again once its events left the window', async () => {
    const limiter = new RateLimiter(db);
    // Long enough for four statements on a busy machine: a window that ended among them would let the third through.
    const rule = { max: 2, windowMs: 5000 };
    const k = key();
    await limiter.consume(rule, 'expiry', k);
    await limiter.consume(rule, 'expiry', k);
    expect(await refusal(limiter.consume(rule, 'expiry', k))).toBeDefined();
    expect(await refusal(limiter.check(rule, 'expiry', k))).toBeDefined();
    await sleep(rule.windowMs + 100);
    await limiter.check(rule, 'expiry', k);
    await limiter.consume(rule, 'expiry', k);
    await limiter.consume(rule, 'expiry', k);
    expect(await refusal(limiter.consume(rule, 'expiry', k))).toBeDefined();
  });

  it('lets exactly max of N concurrent consumes through, across limiters on separate pools', async () => {
    const other = await openDatabase<RateLimitDatabase>({ url: testDb.url, poolSize: 20 });
    try {
      const limiters = [new RateLimiter(db), new RateLimiter(other.db)];
      const rule = { max: 7, windowMs: 60_000 };
      const k = key();
      const outcomes = await Promise.all(
        Array.from({ length: 40 }, (_, i) => refusal(limiters[i % 2]!.consume(rule, 'race', k))),
      );
      expect(outcomes.filter((o) => o === undefined)).toHaveLength(7);
      expect(outcomes.filter((o) => o?.code === 'RATE_LIMITED')).toHaveLength(33);
    } finally {
      await other.close();
    }
  });

  it('counts inside a transaction, which keeps or drops the count with it', async () => {
    const limiter = new RateLimiter(db);
    const rule = { max: 1, windowMs: 60_000 };
    const k = key();
    await db
      .transaction()
      .execute(async (trx) => {
        await limiter.consume(rule, 'trx', k, trx);
        throw new Error('roll back');
      })
      .catch(() => {});
    await limiter.consume(rule, 'trx', k);
    expect(await refusal(limiter.consume(rule, 'trx', k))).toBeDefined();
  });

  it('purges the rows whose events all left the window, on demand and every purgeEvery counts', async () => {
    const rule = { max: 5, windowMs: 50 };
    const k = key();
    await new RateLimiter(db).consume(rule, 'purge', k);
    await sleep(100);
    expect(await new RateLimiter(db).purgeExpired()).toBeGreaterThanOrEqual(1);
    const left = await db.selectFrom('rate_limits').select('key').where('name', '=', 'purge').execute();
    expect(left).toEqual([]);

    const lazy = new RateLimiter(db, { purgeEvery: 3 });
    await lazy.hit(rule, 'lazy', key());
    await lazy.hit(rule, 'lazy', key());
    await sleep(100);
    // The third count starts a purge in the background; its window is long, so however late the purge runs on a busy
    // machine, that window is still open and kept.
    await lazy.hit({ max: 5, windowMs: 60_000 }, 'lazy', key());
    await expect
      .poll(
        async () => (await db.selectFrom('rate_limits').select('key').where('name', '=', 'lazy').execute()).length,
        {
          timeout: 20_000,
        },
      )
      .toBe(1);
  });

  it('does nothing when disabled', async () => {
    const limiter = new RateLimiter(db, { enabled: false });
    const rule = { max: 1, windowMs: 60_000 };
    const k = key();
    for (let i = 0; i < 5; i++) await limiter.consume(rule, 'off', k);
    await limiter.check(rule, 'off', k);
    const rows = await db.selectFrom('rate_limits').select('key').where('name', '=', 'off').execute();
    expect(rows).toEqual([]);
  });
});
