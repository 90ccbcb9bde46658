import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { arrayLiteral, openDatabase, PREPARED, PREPARED_SQL, textArray, uuidArray } from '../src/index.ts';
import { createTestDatabase, type TestDatabase } from '../src/testing/index.ts';

let testDb: TestDatabase;
beforeAll(async () => {
  testDb = await createTestDatabase('common_database');
});
afterAll(async () => {
  await testDb?.drop();
});

describe('openDatabase', () => {
  it('applies session settings to every pooled connection, values with spaces included', async () => {
    const database = await openDatabase<unknown>({
      url: testDb.url,
      poolSize: 3,
      sessionSettings: { jit: 'off', application_name: 'registry test' },
    });
    try {
      const reads = await Promise.all(
        Array.from({ length: 3 }, () =>
          sql<{ jit: string; app: string }>`SELECT current_setting('jit') AS jit,
            current_setting('application_name') AS app, pg_sleep(0.05)`.execute(database.db),
        ),
      );
      for (const r of reads) expect(r.rows[0]).toMatchObject({ jit: 'off', app: 'registry test' });
    } finally {
      await database.close();
    }
  });

  it('reads timestamptz as Dates: each row its own, the same text its own equal Date', async () => {
    const database = await openDatabase<unknown>({ url: testDb.url, poolSize: 1 });
    try {
      const { rows } = await sql<{ at: Date; other: Date | null }>`
        SELECT at, CASE WHEN i = 2 THEN NULL ELSE at + interval '1 day' END AS other
        FROM (VALUES (1, '2026-11-28 10:00:00.123456+00'::timestamptz), (2, '2026-11-28 10:00:00.123456+00'),
                     (3, '1999-01-01 00:00:00+05'), (4, 'infinity')) v(i, at) ORDER BY i`.execute(database.db);
      expect(rows.map((r) => String(r.at instanceof Date ? r.at.getTime() : r.at))).toEqual([
        String(Date.parse('2026-11-28T10:00:00.123Z')),
        String(Date.parse('2026-11-28T10:00:00.123Z')),
        String(Date.parse('1998-12-31T19:00:00Z')),
        'Infinity',
      ]);
      expect(rows[1]?.other).toBeNull();
      expect(rows[0]?.other).toEqual(new Date('2026-11-29T10:00:00.123Z'));
      // Two rows of the same text: equal Dates, not one shared object a caller could change under the other.
      expect(rows[0]?.at).not.toBe(rows[1]?.at);
      rows[0]?.at.setTime(0);
      expect(rows[1]?.at).toEqual(new Date('2026-11-28T10:00:00.123Z'));
    } finally {
      await database.close();
    }
  });

  it('answers queries, row counts, SQLSTATE errors and transactions through the pool', async () => {
    const database = await openDatabase<{ t: { id: number; amount: string } }>({ url: testDb.url, poolSize: 2 });
    const { db } = database;
    try {
      await sql`CREATE TABLE t (id int PRIMARY KEY, amount numeric NOT NULL)`.execute(db);
      await db.insertInto('t').values({ id: 1, amount: '10.000000001' }).execute();
      const count = await sql<{ n: number }>`SELECT count(*) AS n FROM t`.execute(db);
      expect(count.rows).toEqual([{ n: 1 }]);
      expect(await db.selectFrom('t').selectAll().execute()).toEqual([{ id: 1, amount: '10.000000001' }]);
      const updated = await db.updateTable('t').set({ amount: '11' }).where('id', '=', 1).executeTakeFirst();
      expect(updated.numUpdatedRows).toBe(1n);

      // A constraint violation rejects with PostgreSQL's error and code, and the connection stays usable.
      await expect(db.insertInto('t').values({ id: 1, amount: '1' }).execute()).rejects.toMatchObject({
        code: '23505',
        message: expect.stringContaining('t_pkey'),
      });
      await expect(
        db.transaction().execute(async (trx) => {
          await trx.insertInto('t').values({ id: 2, amount: '2' }).execute();
          throw new Error('roll back');
        }),
      ).rejects.toThrow('roll back');
      await db.transaction().execute((trx) => trx.insertInto('t').values({ id: 3, amount: '3' }).execute());
      const ids = await db.selectFrom('t').select('id').orderBy('id').execute();
      expect(ids.map((r) => r.id)).toEqual([1, 3]);
    } finally {
      await database.close();
    }
  });

  it('sends a statement opened by PREPARED as a named prepared statement, once per connection, and no other', async () => {
    const database = await openDatabase<unknown>({ url: testDb.url, poolSize: 2 });
    const prepared = (n: number) => sql<{ n: number }>`${PREPARED_SQL}SELECT 10 / ${n}::int AS n`;
    const stored = (rows: { statement: string }[]) => rows.map((r) => r.statement);
    try {
      await database.db.transaction().execute(async (trx) => {
        // The same text with other values: one stored statement, each execution with its own values.
        expect((await prepared(2).execute(trx)).rows).toEqual([{ n: 5 }]);
        expect((await prepared(5).execute(trx)).rows).toEqual([{ n: 2 }]);
        await sql`SELECT 1 AS unprepared`.execute(trx);
        const { rows } = await sql<{ statement: string }>`SELECT statement FROM pg_prepared_statements`.execute(trx);
        expect(stored(rows)).toEqual([`${PREPARED}SELECT 10 / $1::int AS n`]);
      });
      // An execution that fails rejects with PostgreSQL's error; the stored statement runs again after it.
      await expect(prepared(0).execute(database.db)).rejects.toMatchObject({ code: '22012' });
      expect((await prepared(10).execute(database.db)).rows).toEqual([{ n: 1 }]);

      // Texts that vary are named up to the cap (64 a process), then sent unnamed: every one still answers.
      await database.db.transaction().execute(async (trx) => {
        for (let i = 0; i < 70; i++) {
          const { rows } = await sql<{ n: number }>`${PREPARED_SQL}SELECT ${sql.lit(i)}::int AS n`.execute(trx);
          expect(rows).toEqual([{ n: i }]);
        }
        const { rows } = await sql<{ statement: string }>`SELECT statement FROM pg_prepared_statements`.execute(trx);
        expect(rows.length).toBeLessThanOrEqual(64);
        expect(stored(rows)).toContain(`${PREPARED}SELECT 62::int AS n`);
        expect(stored(rows)).not.toContain(`${PREPARED}SELECT 63::int AS n`);
      });
    } finally {
      await database.close();
    }
  });
});

describe('arrayLiteral', () => {
  it('reads back in PostgreSQL as the values it was given, quotes, escapes, NULLs and all', async () => {
    const database = await openDatabase<unknown>({ url: testDb.url, poolSize: 1 });
    try {
      const texts = [
        '0b8e7c1e-4f6a-4c4e-9d8b-2f1a3c5d7e9f',
        null,
        '',
        'NULL',
        'null',
        'a,b',
        '{braces}',
        'say "hi"',
        'back\\slash',
        ' spaced ',
        'tab\there',
        'ünïcödé',
        undefined,
      ];
      const numbers = [0, -1, 2.5, null, 65535];
      const flags = [true, false, null];
      const { rows } = await sql<{ t: (string | null)[]; n: (number | null)[]; f: (boolean | null)[] }>`
        SELECT ${arrayLiteral(texts)}::text[] AS t, ${arrayLiteral(numbers)}::float8[] AS n,
               ${arrayLiteral(flags)}::boolean[] AS f`.execute(database.db);
      expect(rows[0]?.t).toEqual(texts.map((v) => v ?? null));
      expect(rows[0]?.n).toEqual(numbers);
      expect(rows[0]?.f).toEqual(flags);
      expect(arrayLiteral([])).toBe('{}');
      expect(() => arrayLiteral([Number.NaN])).toThrow(RangeError);
    } finally {
      await database.close();
    }
  });
});

describe('uuidArray and textArray', () => {
  it('read back in PostgreSQL, sent as binary parameters, as the values they were given', async () => {
    const database = await openDatabase<unknown>({ url: testDb.url, poolSize: 1 });
    try {
      const ids = ['0b8e7c1e-4f6a-4c4e-9d8b-2f1a3c5d7e9f', 'FFFFFFFF-0000-4ABC-8DEF-0123456789AB', randomUUID()];
      const texts = [
        '0b8e7c1e',
        null,
        '',
        'NULL',
        'a,b',
        '{braces}',
        'say "hi"',
        'back\\slash',
        'ünïcödé 🚀',
        undefined,
      ];
      const { rows } = await sql<{ u: string[]; t: (string | null)[]; eu: string[]; et: string[]; n: number }>`
        SELECT ${uuidArray(ids)}::uuid[] AS u, ${textArray(texts)}::text[] AS t, ${uuidArray([])}::uuid[] AS eu,
               ${textArray([])}::text[] AS et, cardinality(${uuidArray(ids)}::uuid[]) AS n`.execute(database.db);
      expect(rows[0]?.u).toEqual(ids.map((id) => id.toLowerCase()));
      expect(rows[0]?.t).toEqual(texts.map((v) => v ?? null));
      expect([rows[0]?.eu, rows[0]?.et, rows[0]?.n]).toEqual([[], [], 3]);
      // As an unnest's columns and an index probe's array, the way the registry's heartbeat statements use them.
      const joined = await sql<{ id: string; owner: string | null }>`
        SELECT u.id::text, u.owner FROM unnest(${uuidArray(ids.slice(0, 2))}::uuid[], ${textArray(['a', null])}::text[])
          AS u(id, owner) WHERE u.id = ANY(${uuidArray(ids)}::uuid[]) ORDER BY u.owner NULLS LAST`.execute(database.db);
      expect(joined.rows).toEqual([
        { id: ids[0], owner: 'a' },
        { id: ids[1]?.toLowerCase(), owner: null },
      ]);
    } finally {
      await database.close();
    }
  });

  it('refuses anything but a UUID in a uuid array, so that no other bytes reach the database', () => {
    for (const bad of [
      '',
      'not-a-uuid',
      '0b8e7c1e4f6a4c4e9d8b2f1a3c5d7e9f',
      '0b8e7c1e-4f6a-4c4e-9d8b-2f1a3c5d7e9g',
      '{0b8e7c1e-4f6a-4c4e-9d8b-2f1a3c5d7e9}',
      '0b8e7c1e-4f6a-4c4e-9d8b_2f1a3c5d7e9f',
      'ü'.repeat(36),
    ]) {
      expect(() => uuidArray([randomUUID(), bad]), bad).toThrow(RangeError);
    }
  });
});
