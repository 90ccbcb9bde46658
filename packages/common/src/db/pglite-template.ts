/**
 * A new embedded database copied from a template instead of made anew. Making a PGlite database runs PostgreSQL's
 * initdb in WebAssembly: about 7 s of CPU, and `pnpm start` makes three on a fresh data folder. The template (an
 * empty database, made once per PGlite version in a folder of its own) is copied in about a second.
 */
import { randomUUID } from 'node:crypto';
import { constants, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmdirSync, rmSync } from 'node:fs';
import { copyFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import type { PGlite } from '@electric-sql/pglite';

/** PGlite's version: a template made by one version is not offered to another. */
function pgliteVersion(): string {
  const require = createRequire(import.meta.url);
  // The package's exports leave out its package.json: found from its main file instead.
  for (let dir = path.dirname(require.resolve('@electric-sql/pglite')); dir !== path.dirname(dir); ) {
    const manifest = path.join(dir, 'package.json');
    if (existsSync(manifest)) {
      const pkg = JSON.parse(readFileSync(manifest, 'utf8')) as { name?: string; version?: string };
      if (pkg.name === '@electric-sql/pglite' && pkg.version) return pkg.version;
    }
    dir = path.dirname(dir);
  }
  return 'unknown';
}

const isDatabase = (dir: string) => existsSync(path.join(dir, 'PG_VERSION'));

/**
 * Copies a folder tree: its folders first, then its files (about a thousand, 38 MB) eight at a time, each cloned
 * where the file system can (copy-on-write), else copied. A third of the CPU `fs.cp` takes here, which checks and
 * stats each entry on its way.
 */
async function copyTree(from: string, to: string): Promise<void> {
  const files: string[] = [];
  const walk = (rel: string) => {
    mkdirSync(path.join(to, rel), { recursive: true });
    for (const entry of readdirSync(path.join(from, rel), { withFileTypes: true })) {
      const child = path.join(rel, entry.name);
      if (entry.isDirectory()) walk(child);
      else if (entry.isFile()) files.push(child);
      else throw new Error(`${path.join(from, child)} is not a file or folder: the template is not a PGlite database`);
    }
  };
  walk('');
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < files.length; i = next++) {
      const rel = files[i] as string;
      await copyFile(path.join(from, rel), path.join(to, rel), constants.COPYFILE_FICLONE);
    }
  };
  await Promise.all(Array.from({ length: 8 }, worker));
}

/**
 * Makes `dataDir` a copy of the empty database kept in `templatesDir` (made there first when absent), unless
 * `dataDir` exists and is not empty (a database already, or something this leaves to PGlite to judge). Several
 * processes (or callers in one process) may do so at once: each makes its template under a name of its own and renames it into place; the first
 * rename wins and the others discard theirs. The copy, too, is made beside `dataDir` and renamed into place, so an
 * interrupted one leaves no half database behind. Resolves to what it did.
 */
export async function seedFromTemplate(
  dataDir: string,
  templatesDir: string,
  Lite: typeof PGlite,
): Promise<'existing' | 'copied' | 'made template and copied'> {
  if (existsSync(dataDir) && readdirSync(dataDir).length > 0) return 'existing';
  const template = path.join(path.resolve(templatesDir), `pglite-${pgliteVersion()}`);
  let made = false;
  if (!isDatabase(template)) {
    mkdirSync(path.dirname(template), { recursive: true });
    const own = `${template}.${process.pid}-${randomUUID()}.tmp`;
    const lite = new Lite(own);
    await lite.waitReady;
    await lite.close();
    try {
      renameSync(own, template);
      made = true;
    } catch (err) {
      // Another process put its template in place first.
      if (!isDatabase(template)) throw err;
      rmSync(own, { recursive: true, force: true });
    }
  }
  const copy = `${path.resolve(dataDir)}.${process.pid}-${randomUUID()}.tmp`;
  await copyTree(template, copy);
  if (existsSync(dataDir)) rmdirSync(dataDir);
  else mkdirSync(path.dirname(path.resolve(dataDir)), { recursive: true });
  renameSync(copy, dataDir);
  return made ? 'made template and copied' : 'copied';
}
