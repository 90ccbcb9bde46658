/**
 * `gpu storage cp <file> gpu:<key>` and `cp -r <folder> gpu:<prefix>/`: a file stored under a key (into a remote
 * folder with its base name), a folder's files each under the prefix at its path in the folder, `FILES_AT_ONCE` at a
 * time, one progress bar for all (folder-copy.ts: a file that fails is said, the others go on). A file of `RESUMABLE_FROM` bytes or more goes up in parts, resumably
 * (resumable.ts); a smaller one in one request, streamed from the file.
 */
import { createReadStream, createWriteStream, rmSync } from 'node:fs';
import { mkdtemp, open, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { ObjectInfo, ObjectRef } from '@gpu/client';
import { type Context, UsageError } from './cli.ts';
import { type CopyFilter, isCopied } from './copy-filters.ts';
import { copyEach } from './folder-copy.ts';
import { localError, locally } from './local-errors.ts';
import { type Progress, transferProgress } from './progress.ts';
import { RESUMABLE_FROM, resumableUpload } from './resumable.ts';
import { asPrefix, isPrefix, refOf, shown, uploadKey } from './storage-paths.ts';

export interface CopyOptions {
  bucket?: string;
  recursive: boolean;
  /** `--exclude`/`--include`, in order (copy-filters.ts); none: every file. */
  filters?: readonly CopyFilter[];
  /**
   * `mv`: removes each source once it is copied, when it is still the version copied; never throws (a source it could
   * not remove is said, and counted by the command).
   */
  removeSource?: (source: CopySource) => Promise<void>;
}

/**
 * What one file of a copy came from, as it was when copied: a local file (its size and modification time), or an
 * object (its key, as the command names keys, and its ETag).
 */
export type CopySource = { local: string; size: number; mtimeMs: number } | { key: string; etag: string | null };

/**
 * Copies a local file or folder (`-`: standard input) to `key` (a remote folder when it ends in `/`): the objects
 * stored.
 */
export async function copyUp(ctx: Context, from: string, key: string, opts: CopyOptions): Promise<ObjectInfo[]> {
  if (from === '-') return [await uploadStandardInput(ctx, key, opts)];
  const found = await locally('read', from, () => stat(from));
  if (found.isDirectory()) {
    if (!opts.recursive) throw new UsageError(`${from} is a directory: copy a folder with -r`);
    return uploadFolder(ctx, from, key, opts);
  }
  // A device, a pipe: what mv would remove is not what was stored.
  if (opts.removeSource && !found.isFile()) throw new UsageError(`${from} is not a file: mv moves files`);
  const ref = refOf(uploadKey(from, key), opts.bucket);
  const progress = transferProgress(`${from} -> ${shown(ref.key)}`, found.size, { json: ctx.json });
  try {
    const stored = await uploadFile(ctx, from, found.size, ref, progress);
    await opts.removeSource?.({ local: from, size: found.size, mtimeMs: found.mtimeMs });
    return [stored];
  } finally {
    progress.stop();
  }
}

/**
 * Standard input to one object (as `aws s3 cp - s3://bucket/key`): kept in a temporary file of this machine's until
 * it ends (its length is then known, and a large one goes in parts that resume), then sent as a file; the temporary
 * file is removed whatever happens.
 */
async function uploadStandardInput(ctx: Context, key: string, opts: CopyOptions): Promise<ObjectInfo> {
  if (opts.recursive) throw new UsageError('-r copies folders, not standard input');
  if (isPrefix(key)) throw new UsageError(`standard input has no name: name the object (${shown(`${key}name`)})`);
  return inTemporaryFolder('gpu-stdin-', async (dir) => {
    const file = path.join(dir, 'stdin');
    await locally('write', file, () => pipeline(process.stdin, createWriteStream(file, { mode: 0o600 })));
    const { size } = await stat(file);
    const ref = refOf(key, opts.bucket);
    const progress = transferProgress(`- -> ${shown(ref.key)}`, size, { json: ctx.json });
    try {
      return await uploadFile(ctx, file, size, ref, progress, false);
    } finally {
      progress.stop();
    }
  });
}

/**
 * Runs `work` with a new temporary folder of this machine's (only its user may read it), removed when the work ends,
 * fails, or the run is stopped (Ctrl-C, a stop signal: then the run ends too).
 */
async function inTemporaryFolder<T>(prefix: string, work: (dir: string) => Promise<T>): Promise<T> {
  const dir = await mkdtemp(path.join(tmpdir(), prefix));
  const removeAndExit = (signal: NodeJS.Signals) => {
    rmSync(dir, { recursive: true, force: true });
    process.exit(signal === 'SIGINT' ? 130 : 143);
  };
  process.once('SIGINT', removeAndExit);
  process.once('SIGTERM', removeAndExit);
  try {
    return await work(dir);
  } finally {
    process.off('SIGINT', removeAndExit);
    process.off('SIGTERM', removeAndExit);
    await rm(dir, { recursive: true, force: true });
  }
}

/** One file to one object. */
async function uploadFile(
  ctx: Context,
  file: string,
  size: number,
  ref: ObjectRef,
  progress: Progress,
  resumable = true,
): Promise<ObjectInfo> {
  // A file that cannot be read says so before anything is sent.
  await locally('read', file, async () => (await open(file, 'r')).close());
  try {
    if (size >= RESUMABLE_FROM) return await resumableUpload(ctx, file, ref, progress, resumable);
    const counted = progress.counter();
    // A file that fails while it is read ends the upload with its error (pipeline destroys what follows it).
    pipeline(createReadStream(file), counted).catch(() => {});
    return await ctx.objects.upload(ref, counted, { contentLength: size });
  } catch (err) {
    throw localError(err, 'read', file);
  }
}

interface LocalFile {
  file: string;
  /** Its path in the folder, with `/` between segments. */
  relative: string;
  size: number;
  mtimeMs: number;
}

/** The files of a folder, at any depth (a link to a file counts as the file; other entries are passed over). */
async function filesOf(folder: string): Promise<LocalFile[]> {
  const entries = await locally('read', folder, () => readdir(folder, { recursive: true, withFileTypes: true }));
  const files: LocalFile[] = [];
  for (const entry of entries) {
    if (!entry.isFile() && !entry.isSymbolicLink()) continue;
    const file = path.join(entry.parentPath, entry.name);
    const found = await stat(file).catch(() => undefined);
    if (!found?.isFile()) {
      process.stderr.write(`gpu: passing over ${file}: not a file\n`);
      continue;
    }
    files.push({
      file,
      relative: path.relative(folder, file).split(path.sep).join('/'),
      size: found.size,
      mtimeMs: found.mtimeMs,
    });
  }
  return files.sort((a, b) => (a.relative < b.relative ? -1 : 1));
}

/**
 * A folder's files under a prefix, as `aws s3 cp --recursive` stores them: the destination is the copy (`gpu:dir/` and
 * `gpu:dir` both take `dir/<each file's path>`, `gpu:` the folder's files at the top), so a copy run again after an
 * interruption writes the same keys.
 */
async function uploadFolder(ctx: Context, folder: string, key: string, opts: CopyOptions): Promise<ObjectInfo[]> {
  const prefix = asPrefix(key);
  const all = await filesOf(folder);
  const files = all.filter((f) => isCopied(opts.filters ?? [], f.relative));
  if (files.length === 0) {
    const why = all.length === 0 ? 'holds no files' : `holds no file the filters copy (of ${all.length})`;
    process.stderr.write(`gpu: ${folder} ${why}: nothing copied\n`);
    return [];
  }
  const total = files.reduce((sum, f) => sum + f.size, 0);
  const progress = transferProgress(`${folder} -> ${shown(prefix)} (${files.length} files)`, total, {
    json: ctx.json,
  });
  const copies = files.map((f) => ({ ...f, from: f.file, to: shown(`${prefix}${f.relative}`) }));
  return copyEach(ctx, copies, progress, { what: folder, done: 'stored' }, async (f) => {
    const stored = await uploadFile(ctx, f.file, f.size, refOf(`${prefix}${f.relative}`, opts.bucket), progress);
    await opts.removeSource?.({ local: f.file, size: f.size, mtimeMs: f.mtimeMs });
    return stored;
  });
}
