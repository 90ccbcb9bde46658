/**
 * One `pnpm start` per data folder, even when several find the same stale lock at once: exactly one takes it over;
 * and never while a process it recorded still runs, though the `pnpm start` that ran it is gone.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { LOCK_FILE, lockDataDir } from '../scripts/lib/instance-lock.ts';

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

describe('the data folder lock of a pnpm start that is gone', () => {
  /** A process that runs until killed, as a service of that pnpm start would; its pid and its start time. */
  async function service() {
    const child = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
    await new Promise((r) => child.once('spawn', r));
    const stat = readFileSync(`/proc/${child.pid}/stat`, 'utf8');
    const started = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
    return { child, pid: child.pid as number, started };
  }

  it('is not taken over while a process it recorded runs; once none does, it is', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'platform-lock-'));
    const billing = await service();
    try {
      // Its pnpm start was killed (kill -9); billing still runs, the gateway has stopped already.
      writeFileSync(
        path.join(dir, LOCK_FILE),
        `${DEAD_PID}\n${DEAD_PID - 1} 12345 gateway\n${billing.pid} ${billing.started} billing\n`,
      );
      expect(() => lockDataDir(dir)).toThrow(
        `the data folder ${dir} is still in use by what the pnpm start of pid ${DEAD_PID} ran, though it is gone: ` +
          `billing (pid ${billing.pid}); they stop on their own within 15 s (or stop them: kill ${billing.pid})`,
      );
      billing.child.kill('SIGKILL');
      await new Promise((r) => billing.child.once('exit', r));
      const lock = lockDataDir(dir);
      expect(readFileSync(path.join(dir, LOCK_FILE), 'utf8')).toBe(`${process.pid}\n`);
      // What this one runs is recorded; the lock is given back whole.
      lock.recordChildren([{ name: 'auth', pid: process.pid }]);
      expect(readFileSync(path.join(dir, LOCK_FILE), 'utf8')).toMatch(
        new RegExp(`^${process.pid}\\n${process.pid} \\d+ auth\\n$`),
      );
      lock.release();
      expect(existsSync(path.join(dir, LOCK_FILE))).toBe(false);
    } finally {
      billing.child.kill('SIGKILL');
    }
  });

  it('is taken over when a recorded pid now belongs to a process started later', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'platform-lock-'));
    const stranger = await service();
    try {
      writeFileSync(path.join(dir, LOCK_FILE), `${DEAD_PID}\n${stranger.pid} 1 auth\n`);
      lockDataDir(dir).release();
    } finally {
      stranger.child.kill('SIGKILL');
    }
  });
});
