/**
 * One `pnpm start` per data folder: a lock file in it (`<data>/platform.lock`), so that a second one never opens the
 * first one's embedded databases. It holds the pid of the `pnpm start` that uses it on its first line and, on the
 * lines after, each process that start runs (`<pid> <start time> <name>`, rewritten whole at every start and exit of
 * one). The lock is taken over only when neither that `pnpm start` nor any process it ran lives: its processes stop
 * on their own once it is gone (scripts/lib/lifeline.ts), but until they have, they still hold the databases. The start
 * time (from /proc, where there is one) tells a process of the lock from a later one that was given the same pid.
 *
 * A stale lock (a crash, a reboot) is taken over by one start at a time: a takeover first makes the folder
 * `<data>/platform.lock.takeover` (mkdir either makes it or fails, atomically), so two starts finding the same stale
 * lock cannot both remove it and each take it. The lock appears with its pid already in it (`createFileOnce`) and is
 * rewritten by renaming a whole new file over it, so no start ever reads a partial lock.
 *
 *   const lock = lockDataDir(data);      // SettingError when another pnpm start, or what it ran, holds it
 *   lock.recordChildren([{ name: 'auth', pid: 4242 }]);
 *   process.once('exit', () => lock.release());
 */
import { mkdirSync, readFileSync, renameSync, rmdirSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
// Its own entry: the whole of @gpu/common (fastify and the rest) would slow every pnpm start.
import { createFileOnce } from '@gpu/common/files';
import { SettingError } from './platform.ts';
import { procStat } from './proc.ts';
import { STOP_TIMEOUT_MS } from './supervisor.ts';

export const LOCK_FILE = 'platform.lock';

/** A data folder's lock, held by this process. */
export interface DataDirLock {
  /** Records the processes running under the lock now (every one, replacing the last record). */
  recordChildren(children: readonly { name: string; pid: number }[]): void;
  /** Gives the lock back (only while it is still this process's). */
  release(): void;
}

/** A process's start time (clock ticks since boot, /proc/<pid>/stat), or undefined where it cannot be read. */
function startTime(pid: number): string | undefined {
  return procStat(pid)?.[19];
}

/** Whether `pid` is a live process (of any user). */
function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it lives, under another user.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Whether `pid` is a live process running `pnpm start` (its command line names scripts/start.ts). */
function isPlatformStart(pid: number): boolean {
  if (!isAlive(pid)) return false;
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('start.ts');
  } catch {
    // No /proc (not Linux): a live pid is taken at its word.
    return true;
  }
}

/**
 * Takes the data folder's lock for this process, or throws a SettingError naming the `pnpm start` that holds it, or
 * the processes of one that is gone that still run.
 */
export function lockDataDir(dataDir: string): DataDirLock {
  const file = path.join(dataDir, LOCK_FILE);
  const mine = String(process.pid);
  for (let attempt = 0; attempt < 3; attempt++) {
    if (createFileOnce(file, `${mine}\n`)) return heldLock(file, mine);
    const seen = readLock(file);
    if (seen === undefined) continue; // Removed between our attempt and this read: try again.
    const [first = '', ...rest] = seen.split('\n');
    const holder = Number(first.trim());
    if (Number.isInteger(holder) && holder > 0 && holder !== process.pid && isPlatformStart(holder)) {
      throw new SettingError(
        `the data folder ${dataDir} is in use by another pnpm start (pid ${holder}): stop it, or give this one another PLATFORM_DATA_DIR`,
      );
    }
    const running = rest.flatMap((line) => {
      const [pid, started, name] = line.trim().split(' ');
      const child = { pid: Number(pid), name: name ?? '?' };
      if (!(Number.isInteger(child.pid) && child.pid > 0 && isAlive(child.pid))) return [];
      // A pid given to a process started later is not the one recorded.
      const now = startTime(child.pid);
      return started === '-' || now === undefined || now === started ? [child] : [];
    });
    if (running.length > 0) {
      const pids = running.map((c) => c.pid).join(' ');
      throw new SettingError(
        `the data folder ${dataDir} is still in use by what the pnpm start of pid ${holder} ran, though it is gone: ` +
          `${running.map((c) => `${c.name} (pid ${c.pid})`).join(', ')}; they stop on their own within ${STOP_TIMEOUT_MS / 1000} s ` +
          `(or stop them: kill ${pids})`,
      );
    }
    // Stale (its pnpm start and everything it ran are gone, or the file holds no pid): removed by whichever start
    // holds the takeover, and only if it is still the lock judged stale (another start may have taken it over in the
    // meantime); then taken on the next attempt.
    withTakeover(file, () => {
      if (readLock(file) === seen) unlinkSync(file);
    });
  }
  throw new SettingError(`could not take the lock ${file}: another pnpm start is starting on the same data folder`);
}

/** The lock `file`, just taken by this process (`mine`, its pid). */
function heldLock(file: string, mine: string): DataDirLock {
  const isMine = () => readLock(file)?.split('\n')[0] === mine;
  return {
    recordChildren(children) {
      if (!isMine()) return;
      const lines = children.map((c) => `${c.pid} ${startTime(c.pid) ?? '-'} ${c.name}`);
      const tmp = `${file}.${mine}.tmp`;
      writeFileSync(tmp, [mine, ...lines, ''].join('\n'));
      renameSync(tmp, file);
    },
    release() {
      try {
        if (isMine()) unlinkSync(file);
      } catch {
        // Already gone.
      }
    },
  };
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
