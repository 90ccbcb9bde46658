/**
 * One `pnpm start` per data folder: a lock file in it (`<data>/platform.lock`, holding the pid of the `pnpm start`
 * that uses it), so that a second one never opens the first one's embedded databases. A lock whose pid no longer
 * runs `pnpm start` (a crash, a reboot) is stale and taken over, by one start at a time: a takeover first makes the
 * folder `<data>/platform.lock.takeover` (mkdir either makes it or fails, atomically), so two starts finding the same
 * stale lock cannot both remove it and each take it. The lock appears with its pid already in it (`createFileOnce`), so
 * no start ever reads an empty lock and judges it stale while its holder is still writing it.
 *
 *   const release = lockDataDir(data);   // SettingError when another pnpm start holds it
 *   process.once('exit', release);
 */
import { mkdirSync, readFileSync, rmdirSync, statSync, unlinkSync } from 'node:fs';
import path from 'node:path';
// Its own entry: the whole of @gpu/common (fastify and the rest) would slow every pnpm start.
import { createFileOnce } from '@gpu/common/files';
import { SettingError } from './platform.ts';

export const LOCK_FILE = 'platform.lock';

/** Whether `pid` is a live process running `pnpm start` (its command line names scripts/start.ts). */
function isPlatformStart(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    // EPERM: it lives, under another user.
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('start.ts');
  } catch {
    // No /proc (not Linux): a live pid is taken at its word.
    return true;
  }
}

/**
 * Takes the data folder's lock for this process, or throws a SettingError naming the `pnpm start` that holds it.
 * Returns the function that gives the lock back (only while it is still this process's).
 */
export function lockDataDir(dataDir: string): () => void {
  const file = path.join(dataDir, LOCK_FILE);
  const mine = String(process.pid);
  for (let attempt = 0; attempt < 3; attempt++) {
    if (createFileOnce(file, `${mine}\n`)) {
      return () => {
        try {
          if (readFileSync(file, 'utf8').trim() === mine) unlinkSync(file);
        } catch {
          // Already gone.
        }
      };
    }
    const seen = readLock(file);
    if (seen === undefined) continue; // Removed between our attempt and this read: try again.
    const holder = Number(seen.trim());
    if (Number.isInteger(holder) && holder > 0 && holder !== process.pid && isPlatformStart(holder)) {
      throw new SettingError(
        `the data folder ${dataDir} is in use by another pnpm start (pid ${holder}): stop it, or give this one another PLATFORM_DATA_DIR`,
      );
    }
    // Stale (its pnpm start is gone, or the file holds no pid): removed by whichever start holds the takeover, and
    // only if it is still the lock judged stale (another start may have taken it over in the meantime); then taken on
    // the next attempt.
    withTakeover(file, () => {
      if (readLock(file) === seen) unlinkSync(file);
    });
  }
  throw new SettingError(`could not take the lock ${file}: another pnpm start is starting on the same data folder`);
}

/** The lock file's text, or undefined when there is none. */
function readLock(file: string): string | undefined {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
}

/** How long a takeover may take before its folder is judged left behind by a start that died inside it. */
const TAKEOVER_STALE_MS = 10_000;

/** Runs `fn` while holding `<lock>.takeover`, waiting up to a second for another start's takeover to finish. */
function withTakeover(lockFile: string, fn: () => void): void {
  const dir = `${lockFile}.takeover`;
  for (let waited = 0; waited <= 1000; waited += 50) {
    try {
      mkdirSync(dir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      try {
        if (Date.now() - statSync(dir).mtimeMs > TAKEOVER_STALE_MS) rmdirSync(dir);
      } catch {
        // Finished meanwhile.
      }
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 50);
      continue;
    }
    try {
      fn();
    } finally {
      rmdirSync(dir);
    }
    return;
  }
}
