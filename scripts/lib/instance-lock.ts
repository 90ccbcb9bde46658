/**
 * One `pnpm start` per data folder: a lock file in it (`<data>/platform.lock`, holding the pid of the `pnpm start`
 * that uses it), so that a second one never opens the first one's embedded databases. A lock whose pid no longer
 * runs `pnpm start` (a crash, a reboot) is stale and taken over.
 *
 *   const release = lockDataDir(data);   // SettingError when another pnpm start holds it
 *   process.once('exit', release);
 */
import { readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
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
    try {
      writeFileSync(file, `${mine}\n`, { flag: 'wx', mode: 0o644 });
      return () => {
        try {
          if (readFileSync(file, 'utf8').trim() === mine) unlinkSync(file);
        } catch {
          // Already gone.
        }
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    let holder = Number.NaN;
    try {
      holder = Number(readFileSync(file, 'utf8').trim());
    } catch {
      // Removed between our attempt and this read: try again.
    }
    if (Number.isInteger(holder) && holder > 0 && holder !== process.pid && isPlatformStart(holder)) {
      throw new SettingError(
        `the data folder ${dataDir} is in use by another pnpm start (pid ${holder}): stop it, or give this one another PLATFORM_DATA_DIR`,
      );
    }
    // Stale (its pnpm start is gone): removed, and taken on the next attempt unless another start takes it first.
    try {
      unlinkSync(file);
    } catch {
      // Someone else removed it.
    }
  }
  throw new SettingError(`could not take the lock ${file}: another pnpm start is starting on the same data folder`);
}
