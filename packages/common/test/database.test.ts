import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../src/index.ts';
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
});
