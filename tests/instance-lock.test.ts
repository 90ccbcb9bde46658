/**
 * One `pnpm start` per data folder, even when several find the same stale lock at once: exactly one takes it over.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { LOCK_FILE } from '../scripts/lib/instance-lock.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const holder = path.join(root, 'tests/support/lock-holder-start.ts');

/** A pid that runs nothing: the highest pid a Linux machine can hand out is 4194304. */
const DEAD_PID = 4_194_304 + 1;

/** Starts a holder; resolves with its first line ("got" or "refused: ...") and the process. */
function askForLock(dir: string, startAt: number) {
  const child = spawn(process.execPath, ['--import', 'tsx', holder, dir, String(startAt)], { cwd: root });
  const line = new Promise<string>((resolve) => {
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      if (out.includes('\n')) resolve(out.trim());
    });
    child.on('exit', () => resolve(out.trim()));
  });
  return { child, line };
}

describe('the data folder lock', () => {
  it('is taken over from a dead holder by exactly one of several starts racing for it', async () => {
    for (let round = 0; round < 3; round++) {
      const dir = mkdtempSync(path.join(tmpdir(), 'platform-lock-'));
      writeFileSync(path.join(dir, LOCK_FILE), `${DEAD_PID}\n`);
      // Every holder keeps what it took until the round is over, so a late one cannot take it after a release.
      const startAt = Date.now() + 3000;
      const holders = Array.from({ length: 5 }, () => askForLock(dir, startAt));
      const outcomes = await Promise.all(holders.map((h) => h.line));
      const winners = holders.filter((_, i) => outcomes[i] === 'got');
      for (const h of winners) h.child.kill('SIGTERM');
      await Promise.all(winners.map((h) => new Promise((r) => h.child.once('exit', r))));
      expect(winners, outcomes.join('\n')).toHaveLength(1);
      for (const o of outcomes.filter((o) => o !== 'got'))
        expect(o).toMatch(/^refused: .*in use by another pnpm start/);
      // The winner gave it back when it stopped.
      expect(existsSync(path.join(dir, LOCK_FILE))).toBe(false);
    }
  });
});
