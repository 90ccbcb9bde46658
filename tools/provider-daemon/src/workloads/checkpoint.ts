/**
 * A job's checkpoint directory (`/work/checkpoint/`, its spec's `checkpoint`) as one tar (GNU tar, the machine's):
 *
 * - **While the workload runs**, every `interval_seconds`. The workload is entered and the tar made inside it
 *   (entry.ts: its own namespaces, user and limits), so that nothing it does to its files meanwhile (a link swapped in
 *   for a directory) makes the daemon read a file of the machine's, and the tar's work counts against the workload's
 *   limits: the daemon only receives the stream. A file the workload rewrites in place while it is read may be torn:
 *   a workload writes each checkpoint file whole under another name and renames it (atomic; tar keeps reading the
 *   file it opened).
 * - **When it ended** (or its daemon died under it: a later life does it), the tar is made from its disk
 *   (`packDirectory`): `checkpoint/` is opened once, only if it is a directory (a link there is not followed), and
 *   tar reads it through that descriptor, descending with `openat` and `O_NOFOLLOW` (GNU tar's own way): links in it
 *   are stored as links, and a link put in place of a directory while tar reads makes tar skip it, never read through
 *   it. A workload that never ran keeps none (its directory is the restored one, or a restore that failed).
 * - **Before the next attempt starts**, the tar the job kept last is extracted into the new work directory's
 *   `checkpoint/` as the workload's user (never as root): GNU tar refuses members that climb out (`..`, leading `/`)
 *   and makes links that point out only after every file, so none is written through; the work directory's disk
 *   bounds what it may hold.
 *
 * Each tar is at most what the workload's disk allowance holds with tar's own overhead (`maxCheckpointBytes`); one
 * that is larger is not kept (the one before stands).
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { closeSync, constants, createReadStream, createWriteStream, openSync, rmSync } from 'node:fs';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { CHECKPOINT_DIR } from '@gpu/common';
import { MAX_SINGLE_PUT_BYTES } from '../upload.ts';
import { type Entry, entryCommand, HELPERS_PATH } from './entry.ts';

/** The directory's name in the work directory. */
export const CHECKPOINT_NAME = 'checkpoint';

/** The longest one tar may take. */
const PACK_TIMEOUT_MS = 10 * 60_000;

/** Why a checkpoint could not be made or restored. */
export class CheckpointError extends Error {}

/**
 * The largest tar of a checkpoint kept for a workload of `diskBytes`: what its disk holds and tar's headers and
 * padding (a directory of many small files grows by a block each), at most one PUT.
 */
export function maxCheckpointBytes(diskBytes: number): number {
  return Math.min(MAX_SINGLE_PUT_BYTES, diskBytes + Math.max(1 << 20, Math.ceil(diskBytes / 8)));
}

/**
 * What `tar --create` is told: holes kept as holes, and a file or directory that changed or went while it was read
 * (the workload renaming a new checkpoint file in) said nowhere. Such a tar ends with status 1 and is whole: each file
 * in it is as tar read it.
 */
const CREATE = ['--create', '--file=-', '--sparse', '--warning=no-file-changed', '--warning=no-file-removed'];

/**
 * Runs `file args`, its standard output into `out` (at most `maxBytes`), its standard input from `input`, `fd3` as its
 * descriptor 3; an exit status not in `ok` throws.
 */
async function run(
  command: { file: string; args: string[]; env: Record<string, string> },
  io: { out?: string; maxBytes?: number; input?: string; ok?: number[]; fd3?: number },
): Promise<void> {
  const child = spawn(command.file, command.args, {
    env: command.env,
    cwd: '/',
    stdio: [
      io.input ? 'pipe' : 'ignore',
      io.out ? 'pipe' : 'ignore',
      'pipe',
      ...(io.fd3 === undefined ? [] : [io.fd3]),
    ],
  });
  const timer = setTimeout(() => child.kill('SIGKILL'), PACK_TIMEOUT_MS);
  let stderr = '';
  child.stderr!.on('data', (c: Buffer) => {
    if (stderr.length < 2000) stderr += c.toString();
  });
  const closed = once(child, 'close') as Promise<[number | null, NodeJS.Signals | null]>;
  const error = once(child, 'error').then(([err]) => {
    throw new CheckpointError(`tar could not start: ${(err as Error).message}`);
  });
  error.catch(() => {});
  try {
    const moved: Promise<unknown>[] = [];
    if (io.input) moved.push(pipeline(createReadStream(io.input), child.stdin!).catch(() => {}));
    if (io.out) {
      let bytes = 0;
      const limit = io.maxBytes ?? Number.POSITIVE_INFINITY;
      const capped = new Transform({
        transform(chunk: Buffer, _enc, done) {
          bytes += chunk.length;
          if (bytes > limit) {
            child.kill('SIGKILL');
            done(new CheckpointError(`the checkpoint holds more than the disk allowance, ${limit} bytes`));
          } else done(null, chunk);
        },
      });
      moved.push(pipeline(child.stdout!, capped, createWriteStream(io.out, { mode: 0o600 })));
    }
    const [[code, signal]] = await Promise.race([Promise.all([closed, ...moved]), error]);
    if (code === null || !(io.ok ?? [0]).includes(code)) {
      throw new CheckpointError(`tar ended ${signal ?? `with ${code}`}: ${stderr.trim().slice(0, 500)}`);
    }
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Packs the running workload's `/work/checkpoint/` into `out` from inside it (`dir`: the daemon's own directory for
 * the entry's variables). Throws `CheckpointError` (or the entry's error: it cannot be entered).
 */
export async function packRunning(entry: Entry, dir: string, out: string, maxBytes: number): Promise<void> {
  const argv = ['tar', ...CREATE, `--directory=${CHECKPOINT_DIR.inside}`, '.'];
  try {
    await run(entryCommand(entry, { argv, tty: false }, dir), { out, maxBytes, ok: [0, 1] });
  } catch (err) {
    rmSync(out, { force: true });
    throw err;
  }
}

/**
 * Packs `<workDir>/checkpoint/` into `out`, from the daemon's side: a workload that has ended. False when there is no such directory (or a link, or anything but a
 * directory, there: nothing of the machine's is read through it). Throws `CheckpointError`.
 */
export async function packDirectory(workDir: string, out: string, maxBytes: number): Promise<boolean> {
  let fd: number;
  try {
    fd = openSync(`${workDir}/${CHECKPOINT_NAME}`, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ELOOP' || code === 'ENOTDIR') return false;
    throw new CheckpointError(`the checkpoint directory could not be opened: ${(err as Error).message}`);
  }
  // tar changes into the directory this descriptor holds (its descriptor 3), whatever is at the path by then.
  const command = {
    file: 'tar',
    args: [...CREATE, '--directory=/proc/self/fd/3', '.'],
    env: { PATH: HELPERS_PATH, LC_ALL: 'C' },
  };
  try {
    await run(command, { out, maxBytes, ok: [0, 1], fd3: fd });
    return true;
  } catch (err) {
    rmSync(out, { force: true });
    throw err;
  } finally {
    closeSync(fd);
  }
}

/**
 * Extracts the tar at `file` (the daemon's) into `dir` (the new work directory's `checkpoint/`, made and owned by
 * the workload's user beforehand) as user `uid` when the daemon is root (absent: as the daemon, which its workloads
 * run as). Throws `CheckpointError`.
 */
export async function unpack(file: string, dir: string, uid: number | undefined): Promise<void> {
  const tar = ['tar', '--extract', '--file=-', `--directory=${dir}`, '--no-same-owner', '--delay-directory-restore'];
  const args =
    uid === undefined ? tar : ['setpriv', `--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', '--', ...tar];
  await run({ file: args[0]!, args: args.slice(1), env: { PATH: HELPERS_PATH, LC_ALL: 'C' } }, { input: file });
}
