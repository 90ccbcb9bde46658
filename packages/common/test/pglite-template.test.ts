/**
 * Embedded databases made from a template (what `pnpm start` does on a fresh data folder): through `openDatabase`
 * with a real PGlite, each copy is a working database of its own, several made at once share one template made once,
 * and an existing database is opened, never overwritten.
 */
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { sql } from 'kysely';
import { afterAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../src/db/database.ts';
import { seedFromTemplate } from '../src/db/pglite-template.ts';

const root = mkdtempSync(path.join(tmpdir(), 'pglite-template-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('embedded databases from a template', () => {
  it('makes the template once for several new databases at once, each a database of its own', async () => {
    const templates = path.join(root, 'templates');
    const dirs = ['a', 'b', 'c'].map((n) => path.join(root, 'data', n));
    const opened = await Promise.all(
      dirs.map((d) => openDatabase({ embeddedPath: d, embeddedTemplateDir: templates })),
    );
    try {
      // One template folder, no temporary folder left behind (here or beside the data folders).
      expect(readdirSync(templates).filter((f) => f.startsWith('pglite-'))).toHaveLength(1);
      expect(readdirSync(templates).some((f) => f.endsWith('.tmp'))).toBe(false);
      expect(readdirSync(path.join(root, 'data')).sort()).toEqual(['a', 'b', 'c']);
      // Each works, and what one writes the others do not see.
      await sql`CREATE TABLE t (v text)`.execute(opened[0]!.db);
      await sql`INSERT INTO t VALUES ('only in a')`.execute(opened[0]!.db);
      const rows = await sql<{ v: string }>`SELECT v FROM t`.execute(opened[0]!.db);
      expect(rows.rows).toEqual([{ v: 'only in a' }]);
      await expect(sql`SELECT v FROM t`.execute(opened[1]!.db)).rejects.toThrow(/does not exist/);
    } finally {
      await Promise.all(opened.map((o) => o.close()));
    }
    // Opened again with the template set: the existing database with its data, not a fresh copy.
    expect(await seedFromTemplate(dirs[0]!, templates, PGlite)).toBe('existing');
    const again = await openDatabase({ embeddedPath: dirs[0]!, embeddedTemplateDir: templates });
    try {
      const rows = await sql<{ v: string }>`SELECT v FROM t`.execute(again.db);
      expect(rows.rows).toEqual([{ v: 'only in a' }]);
    } finally {
      await again.close();
    }
    // A later new database is a copy of the template, made no more.
    expect(await seedFromTemplate(path.join(root, 'data', 'd'), templates, PGlite)).toBe('copied');
    expect(existsSync(path.join(root, 'data', 'd', 'PG_VERSION'))).toBe(true);
  });
});
