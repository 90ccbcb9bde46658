/**
 * A workload's disk allowance (`workloads.disk_mb` bytes, `workloads.disk_files` files and directories), kept by the
 * kernel: each session gets **a filesystem of its own**, an ext4 image in its directory (`disk.img`, its blocks
 * reserved on the machine's disk in full when it is made, so that the machine's disk filling up never fails the
 * workload's writes inside its allowance) loop-mounted at `fs/`, whose `work/` is the workload's `/work`
 * and `tmp/` its `/tmp`. A write past the allowance fails inside the workload (ENOSPC, for bytes or for files), the
 * machine's own disk and inodes are never at stake, and nothing walks the workload's files: the daemon's check is one
 * `statfs` a second, whatever the workload made. The image is sized so the workload can store at most its allowance
 * (the filesystem's own records take 1–5 % of it); its inodes are the file allowance.
 *
 * That takes root (mounting), `mkfs.ext4` (e2fsprogs, on every Debian) and loop devices. A daemon without them (not
 * root, a container without `/dev/loop*`) says so at its start and falls back to **the watch**: `du` in a process of
 * its own, never on the daemon's event loop, counting the work directory's and its `/tmp`'s (a directory beside it,
 * never memory) bytes and files together each second (past either: `disk_limit`). The watch can be outrun between two
 * looks; the filesystem cannot.
 *
 * After a restart the daemon finds each session's filesystem still mounted (mounts outlive the process), or mounts
 * its image again, read-only, to upload what it holds; once the files are kept (or their upload window closed) the
 * filesystem is unmounted and the image removed.
 */
import { execFile } from 'node:child_process';
import { chownSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statfsSync, statSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';

const exec = promisify(execFile);

/** Its allowance. */
export interface DiskAllowance {
  diskBytes: number;
  /** Files and directories (its inodes). */
  diskFiles: number;
}

/** A workload's place on disk, as the sandbox or container binds it. */
export interface SessionDisk {
  /** `filesystem`: a filesystem of its own, bounded by the kernel; `watch`: plain directories, watched. */
  readonly kind: 'filesystem' | 'watch';
  /** Bound at `/work`. */
  readonly workDir: string;
  /** Bound at `/tmp` (on its disk, or beside its watched work directory); null: a tmpfs of the byte allowance. */
  readonly tmpDir: string | null;
  /** Whether it is at or past its allowance (bytes or files), as last seen: never blocks, never walks. */
  full(): boolean;
  /** Stops what it runs in the background (the watch's `du`). */
  close(): void;
}

/** The image in a session's directory, and its mount point. */
const IMAGE = 'disk.img';
const MOUNT = 'fs';
/** Bytes of one inode (ext4's default; 128 would stop at 2038). */
const INODE_BYTES = 256;
/** A filesystem with less than this free, or no inode free, is full: the workload's writes are failing. */
const FULL_MARGIN_BYTES = 64 * 1024;

/** The machine keeps this much of the disk under its run directory for itself (the daemon's state and logs). */
const KEPT_BYTES = 1 << 30;
/**
 * What a workload may take of the machine's disk per byte of its allowance: its filesystem, its inputs beside it (up
 * to the allowance) and the archive of a checkpoint it restores or takes (about the allowance).
 */
const BYTES_PER_ALLOWED_BYTE = 3;

/**
 * The MB of disk each workload can have on this machine, one running on each of its `gpus` GPUs at once: the disk
 * under `runDir` (free, and what the workloads' filesystems already hold there), less what the machine keeps for
 * itself and each filesystem's inode table (`diskFiles` inodes), shared by the GPUs at three bytes of disk per byte
 * allowed (BYTES_PER_ALLOWED_BYTE).
 */
export function diskShareMb(runDir: string, gpus: number, diskFiles: number): number {
  let dir = path.resolve(runDir);
  while (!existsSync(dir)) dir = path.dirname(dir);
  const disk = statfsSync(dir);
  let held = 0;
  try {
    for (const entry of readdirSync(runDir, { withFileTypes: true })) {
      if (!entry.isDirectory()) continue;
      try {
        held += statSync(path.join(runDir, entry.name, IMAGE)).blocks * 512;
      } catch {
        // A session without a filesystem of its own.
      }
    }
  } catch {
    // No run directory yet: nothing held.
  }
  const perGpu = (disk.bavail * disk.bsize + held - KEPT_BYTES) / Math.max(1, gpus) - diskFiles * INODE_BYTES;
  return Math.max(0, Math.floor(perGpu / BYTES_PER_ALLOWED_BYTE / (1024 * 1024)));
}

/** The paths of a session's disk under its directory. */
function diskPaths(sessionDir: string) {
  const mount = path.join(sessionDir, MOUNT);
  return { image: path.join(sessionDir, IMAGE), mount, work: path.join(mount, 'work'), tmp: path.join(mount, 'tmp') };
}

/** Whether `dir` is a mount point (in the daemon's mount namespace). */
function mounted(dir: string): boolean {
  const target = path.resolve(dir);
  try {
    return readFileSync('/proc/self/mountinfo', 'utf8')
      .split('\n')
      .some((line) => unescapeMountPath(line.split(' ')[4] ?? '') === target);
  } catch {
    return false;
  }
}

/** mountinfo writes a space, tab, newline and backslash in a path as octal escapes. */
const unescapeMountPath = (p: string) =>
  p.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(Number.parseInt(o, 8)));

/**
 * Why this machine cannot give workloads filesystems of their own (null: it can): tried once at the daemon's start
 * with a small image in `runDir`.
 */
export async function filesystemProblem(runDir: string): Promise<string | null> {
  if (process.getuid?.() !== 0) return 'the daemon does not run as root (mounting needs it)';
  const dir = path.join(runDir, `.disk-check-${process.pid}`);
  try {
    mkdirSync(dir, { recursive: true });
    await makeFilesystem(dir, { diskBytes: 16 * 1024 * 1024, diskFiles: 1024 }, 0);
    return null;
  } catch (err) {
    return (err as Error).message.split('\n')[0] ?? 'unknown';
  } finally {
    await releaseDisk(dir).catch(() => {});
    await rm(dir, { recursive: true, force: true }).catch(() => {});
  }
}

/** Makes the image and mounts it, with `work/` and `tmp/` owned by `uid`. */
async function makeFilesystem(sessionDir: string, allowance: DiskAllowance, uid: number): Promise<void> {
  const p = diskPaths(sessionDir);
  rmSync(p.image, { force: true });
  // The allowance for data, plus the inode table (the rest of the filesystem's records come out of the allowance).
  const size = allowance.diskBytes + allowance.diskFiles * INODE_BYTES;
  // Its blocks are reserved now (fallocate: instant, nothing written): a disk without room for them is said here, before
  // the workload starts, rather than as write errors inside it. A filesystem that cannot reserve gets a sparse image.
  await exec('fallocate', ['-l', String(size), p.image]).catch(async (err: Error) => {
    if (!/not supported/i.test(err.message)) throw err;
    await exec('truncate', ['-s', String(size), p.image]);
  });
  await exec('mkfs.ext4', [
    '-q',
    '-F',
    // No journal (a session's scratch space, gone after it) and no room kept for growing it.
    '-O',
    '^has_journal,^resize_inode',
    '-m',
    '0',
    '-N',
    String(allowance.diskFiles),
    '-I',
    String(INODE_BYTES),
    '-b',
    '4096',
    '-E',
    'lazy_itable_init=1,nodiscard',
    p.image,
  ]);
  mkdirSync(p.mount, { recursive: true });
  // noinit_itable: the kernel does not zero the inode tables behind it (they are written as files are made).
  await exec('mount', ['-o', 'loop,nosuid,nodev,noatime,noinit_itable', p.image, p.mount]);
  for (const dir of [p.work, p.tmp]) {
    mkdirSync(dir);
    chownSync(dir, uid, uid);
  }
}

/**
 * Makes a session's disk: a filesystem of its own (`kind` filesystem), or watched directories. `uid`: the workload's
 * user (null: the daemon's own).
 */
export async function prepareDisk(
  sessionDir: string,
  allowance: DiskAllowance,
  kind: 'filesystem' | 'watch',
  uid: number | null,
): Promise<SessionDisk> {
  const p = diskPaths(sessionDir);
  if (kind === 'filesystem') {
    await makeFilesystem(sessionDir, allowance, uid ?? 0);
    return filesystemDisk(p.mount, p.work, p.tmp);
  }
  const work = path.join(sessionDir, 'work');
  const tmp = path.join(sessionDir, 'tmp');
  for (const dir of [work, tmp]) {
    mkdirSync(dir, { recursive: true });
    if (uid !== null) chownSync(dir, uid, uid);
  }
  return watchedDisk(work, tmp, allowance);
}

function filesystemDisk(mount: string, work: string, tmp: string): SessionDisk {
  return {
    kind: 'filesystem',
    workDir: work,
    tmpDir: tmp,
    full() {
      try {
        const s = statfsSync(mount);
        return s.bavail * s.bsize < FULL_MARGIN_BYTES || s.ffree === 0;
      } catch {
        return false;
      }
    },
    close() {},
  };
}

/**
 * Plain directories, counted by `du` in a process of its own each time the last count is done: the daemon's event
 * loop never walks them. Past the bytes or the files: full.
 */
function watchedDisk(work: string, tmp: string, allowance: DiskAllowance): SessionDisk {
  let over = false;
  let counting = false;
  let closed = false;
  const count = async (args: string[]) => {
    // du says what it could not read on stderr and exits 1; its total (the last line) still stands.
    const { stdout } = await exec('du', [...args, '-s', '-c', work, tmp], { maxBuffer: 1 << 20 }).catch(
      (err: { stdout?: string }) => ({ stdout: err.stdout ?? '' }),
    );
    const total = stdout.trim().split('\n').at(-1) ?? '';
    return Number(total.split('\t')[0]) || 0;
  };
  return {
    kind: 'watch',
    workDir: work,
    tmpDir: tmp,
    full() {
      if (!counting && !closed) {
        counting = true;
        void (async () => {
          try {
            const files = await count(['--inodes']);
            const bytes = files > allowance.diskFiles ? 0 : await count(['--bytes']);
            over = files > allowance.diskFiles || bytes > allowance.diskBytes;
          } finally {
            counting = false;
          }
        })();
      }
      return over;
    },
    close() {
      closed = true;
    },
  };
}

/**
 * A session's disk after a restart, to read its files: its filesystem, still mounted or mounted again read-only, or
 * its plain work directory; null when there is none.
 */
export async function reopenDisk(sessionDir: string): Promise<{ workDir: string } | null> {
  const p = diskPaths(sessionDir);
  if (existsSync(p.image)) {
    if (!mounted(p.mount)) {
      mkdirSync(p.mount, { recursive: true });
      await exec('mount', ['-o', 'loop,ro,nosuid,nodev,noexec,noinit_itable', p.image, p.mount]);
    }
    return { workDir: p.work };
  }
  const work = path.join(sessionDir, 'work');
  return existsSync(work) ? { workDir: work } : null;
}

/**
 * Unmounts a session's filesystem (lazily when something still holds it: it goes once that lets go) and removes its
 * image and work directory; the rest of the session's directory (its logs) stays. Never blocks the event loop, even on
 * a watched directory of a million files.
 */
export async function releaseDisk(sessionDir: string): Promise<void> {
  const p = diskPaths(sessionDir);
  if (mounted(p.mount)) {
    await exec('umount', [p.mount]).catch(() => exec('umount', ['-l', p.mount]));
  }
  await rm(p.mount, { recursive: true, force: true });
  await rm(p.image, { force: true });
  await rm(path.join(sessionDir, 'work'), { recursive: true, force: true });
}
