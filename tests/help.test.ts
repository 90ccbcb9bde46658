/**
 * Every script of package.json answers `--help` with its usage and exit status 0, and does nothing else: no data
 * folder made (pnpm start, pnpm demo), no test servers started (pnpm test), no benchmark run, no file of the checkout
 * changed (pnpm format), within seconds. Each benchmark answers `pnpm bench <name> --help` too.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { root } from './support/platform-start.ts';

const run = promisify(execFile);
const scripts = Object.keys(
  (JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts,
);
// Ports where nothing listens (wallet-cli.test.ts's "nowhere"): a command that went on would find nothing there.
const nowhere = String((process.env.TEST_PORT_BASE ? Number(process.env.TEST_PORT_BASE) : 28000) + 50);

/** The checkout's changed and new files (what git does not ignore). */
const changedFiles = async () => (await run('git', ['status', '--porcelain'], { cwd: root })).stdout;

/** `pnpm <args>` pointed at a data folder that does not exist and at ports where nothing listens. */
async function pnpm(args: string[]) {
  const dataDir = path.join(mkdtempSync(path.join(tmpdir(), 'help-')), 'data');
  const testEnvDir = path.join(path.dirname(dataDir), 'test-env');
  const res = await run('pnpm', ['--silent', ...args], {
    cwd: root,
    env: {
      ...process.env,
      PLATFORM_DATA_DIR: dataDir,
      PLATFORM_PORT_BASE: nowhere,
      TEST_ENV_DIR: testEnvDir,
      BENCH_ONLY: '1',
    },
    timeout: 30_000,
  }).then(
    (r) => ({ code: 0, ...r }),
    (err: { code: number | null; signal?: string; stdout: string; stderr: string }) => err,
  );
  return { ...res, madeFolders: [dataDir, testEnvDir].filter((d) => existsSync(d)) };
}

describe('--help', () => {
  it.each(scripts)(
    'pnpm %s --help prints its usage, exit 0, and does nothing else',
    { timeout: 60_000 },
    async (name) => {
      const before = await changedFiles();
      const res = await pnpm([name, '--help']);
      expect(res.code, res.stderr).toBe(0);
      expect(res.stdout).toMatch(/usage/i);
      expect(res.madeFolders).toEqual([]);
      expect(await changedFiles()).toBe(before);
    },
  );

  const benchmarks = [
    'storage',
    'storage-listing',
    'auth',
    'registry',
    'billing',
    'billing-usage',
    'gateway',
    'workloads',
    'reach',
    'jobs',
    'spot',
    'startup',
  ];
  it('pnpm bench <name> --help says what each benchmark measures, exit 0, running none', {
    timeout: 120_000,
  }, async () => {
    for (const name of benchmarks) {
      const res = await pnpm(['bench', name, '--help']);
      expect(res.code, `${name}: ${res.stderr}`).toBe(0);
      expect(res.stdout).toMatch(/^usage: pnpm bench /);
      // More than the usage line: the benchmark's own description.
      expect(res.stdout.trim().split('\n').length, name).toBeGreaterThan(2);
      expect(res.madeFolders).toEqual([]);
    }
  });

  it('a command that takes no arguments refuses one in one line, exit 2, starting nothing', {
    timeout: 60_000,
  }, async () => {
    for (const name of ['start', 'demo', 'build']) {
      const res = await pnpm([name, '--port', '9999']);
      expect(res.code, name).toBe(2);
      expect(res.stderr).toBe(`pnpm ${name}: takes no arguments, got --port 9999 (pnpm ${name} --help shows how)\n`);
      expect(res.madeFolders).toEqual([]);
    }
  });
});
