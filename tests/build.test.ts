/**
 * `pnpm start` runs the programs compiled by scripts/lib/build.ts, rebuilding only when something changed. A stale
 * build would start yesterday's code, so: a change to a source, a new import, a lost output or a changed
 * package.json must each make the next start compile again, and an unchanged tree must not. Tried on a small package
 * of its own inside the repository (the builder compiles workspace sources only), with a build record of its own.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compiledPath, ensureBuilt, isBuildCurrent } from '../scripts/lib/build.ts';
import { repoRoot } from '../scripts/lib/platform.ts';

const dir = path.join(repoRoot, '.test-env', `build-test-${process.pid}-${Date.now()}`);
const pkg = path.join(dir, 'pkg');
const infoFile = path.join(dir, 'build-info.json');
const rel = (file: string) => path.relative(repoRoot, path.join(pkg, file));
const entry = rel('src/main.ts');
const write = (file: string, text: string) => {
  mkdirSync(path.dirname(path.join(pkg, file)), { recursive: true });
  writeFileSync(path.join(pkg, file), text);
};
/** What the compiled program prints, run with plain node as `pnpm start` runs it. */
const run = () => execFileSync(process.execPath, [compiledPath(entry)], { encoding: 'utf8' }).trim();

beforeAll(() => {
  write('package.json', JSON.stringify({ name: 'build-test-pkg', private: true, type: 'module' }));
  write('src/main.ts', "import { greeting } from './greeting.ts';\nconsole.log(greeting('platform'));\n");
  write('src/greeting.ts', "export const greeting = (who: string): string => 'hello ' + who;\n");
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('the build pnpm start runs', () => {
  it('compiles the entry and what it imports into the package dist/, runnable with plain node', async () => {
    expect(isBuildCurrent([entry], infoFile)).toBe(false);
    // Each compiled file comes with its source map: 4 outputs.
    expect(await ensureBuilt([entry], infoFile)).toMatch(/^compiled 2 files \(4 changed\)/);
    expect(compiledPath(entry)).toBe(path.join(pkg, 'dist', 'src', 'main.js'));
    expect(run()).toBe('hello platform');
  });

  it('does nothing when nothing changed', async () => {
    expect(isBuildCurrent([entry], infoFile)).toBe(true);
    expect(await ensureBuilt([entry], infoFile)).toBeUndefined();
  });

  it('recompiles after a source changes, rewriting only the changed output', async () => {
    write('src/greeting.ts', "export const greeting = (who: string): string => 'good morning, ' + who;\n");
    expect(isBuildCurrent([entry], infoFile)).toBe(false);
    // greeting.js and its map; main.js, which imports it, is the same and left alone.
    expect(await ensureBuilt([entry], infoFile)).toMatch(/^compiled 2 files \(2 changed\)/);
    expect(run()).toBe('good morning, platform');
  });

  it('follows a new import', async () => {
    write('src/name.ts', "export const name = 'renters';\n");
    write(
      'src/main.ts',
      "import { greeting } from './greeting.ts';\nimport { name } from './name.ts';\nconsole.log(greeting(name));\n",
    );
    expect(await ensureBuilt([entry], infoFile)).toMatch(/^compiled 3 files/);
    expect(run()).toBe('good morning, renters');
  });

  it('restores an output that went missing', async () => {
    unlinkSync(compiledPath(rel('src/name.ts')));
    expect(isBuildCurrent([entry], infoFile)).toBe(false);
    expect(await ensureBuilt([entry], infoFile)).toMatch(/\(1 changed\)/);
    expect(run()).toBe('good morning, renters');
  });

  it('is stale when the package.json changes (its exports decide what an import means)', async () => {
    write('package.json', JSON.stringify({ name: 'build-test-pkg', private: true, type: 'module', version: '1.0.1' }));
    expect(isBuildCurrent([entry], infoFile)).toBe(false);
    expect(await ensureBuilt([entry], infoFile)).toMatch(/\(0 changed\)/);
    expect(isBuildCurrent([entry], infoFile)).toBe(true);
  });

  it('is stale when asked for other entries than it built', async () => {
    expect(isBuildCurrent([entry, rel('src/name.ts')], infoFile)).toBe(false);
  });
});
