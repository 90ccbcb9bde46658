/**
 * `gpu storage cp gpu:<key> <file>` and `cp -r gpu:<prefix>/ <folder>`: an object written to a file (into a local
 * folder with its base name; `-`: standard output), a remote folder's objects each to its path under the local folder,
 * `FILES_AT_ONCE` at a time, one progress bar for all. Every file is written whole or not at all (download.ts: a
 * temporary file renamed, resumed by the next run).
 */
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { ApiError, type ObjectInfo } from '@gpu/client';
import { type Context, UsageError } from './cli.ts';
import { isCopied } from './copy-filters.ts';
import { downloadFile, headOf, type ObjectVersion } from './download.ts';
import { copyEach } from './folder-copy.ts';
import { locally } from './local-errors.ts';
import { transferProgress } from './progress.ts';
import {
  asPrefix,
  downloadFile as fileFor,
  fileUnder,
  isPrefix,
  nothingUnder,
  objectNotFound,
  refOf,
  shown,
} from './storage-paths.ts';
import type { CopyOptions } from './storage-upload.ts';

/** A file written: the object's key, where it went, its size. */
export interface Downloaded {
  key: string;
  file: string;
  size: number;
}

/** Every object under `prefix`, in key order. */
export async function objectsUnder(ctx: Context, prefix: string, bucket?: string): Promise<ObjectInfo[]> {
  const objects: ObjectInfo[] = [];
  for await (const o of ctx.objects.listAll(bucket, { ...(prefix ? { prefix } : {}), metadata: false })) {
    objects.push(o);
  }
  return objects;
}

/** Copies the object or remote folder `key` to `to`: the files written (none for standard output). */
export async function copyDown(ctx: Context, key: string, to: string, opts: CopyOptions): Promise<Downloaded[]> {
  if (opts.recursive) {
    const prefix = asPrefix(key);
    const objects = await objectsUnder(ctx, prefix, opts.bucket);
    if (objects.length > 0) {
      if (to === '-') throw new UsageError(`${shown(prefix)} is a folder: copy it to a local folder, not -`);
      return downloadFolder(ctx, prefix, objects, to, opts);
    }
    // `cp -r` of a file copies the file.
    if (isPrefix(key)) throw nothingUnder(key);
  } else if (isPrefix(key)) {
    throw new UsageError(`${shown(key)} is a folder: copy it with -r`);
  }
  if (to === '-') {
    await toStandardOutput(ctx, key, opts);
    return [];
  }
  return [await downloadOne(ctx, key, to, opts)];
}

/** The object's version (its size, ETag); a name that is a folder's (without -r) said so, not "not found". */
export async function objectVersion(ctx: Context, key: string, opts: CopyOptions): Promise<ObjectVersion> {
  try {
    return await headOf(ctx, refOf(key, opts.bucket));
  } catch (err) {
    if (err instanceof ApiError && err.status === 404 && !opts.recursive) {
      const under = await ctx.objects.list(opts.bucket, { prefix: asPrefix(key), limit: 1, metadata: false });
      if (under.objects.length > 0) throw new UsageError(`${shown(key)} is a folder: copy it with -r`);
    }
    throw err;
  }
}

async function downloadOne(ctx: Context, key: string, to: string, opts: CopyOptions): Promise<Downloaded> {
  const ref = refOf(key, opts.bucket);
  const version = await objectVersion(ctx, key, opts);
  // Into a folder named with a trailing separator that is not there yet: made, as `aws s3 cp` makes it.
  if (/[/\\]$/.test(to)) await locally('write', to, () => mkdir(to, { recursive: true }));
  const file = fileFor(key, to);
  const progress = transferProgress(`${shown(key)} -> ${file}`, version.size, { json: ctx.json });
  try {
    await downloadFile(ctx, ref, file, progress, version);
  } finally {
    progress.stop();
  }
  process.stderr.write(`${shown(key)} -> ${file} (${version.size} bytes)\n`);
  await opts.removeSource?.({ key, etag: version.etag });
  return { key, file, size: version.size };
}

/** The object's bytes on standard output, as they come (nothing to resume: a pipe cannot be written again). */
async function toStandardOutput(ctx: Context, key: string, opts: CopyOptions) {
  const ref = refOf(key, opts.bucket);
  const got = await ctx.objects.download(ref).catch((err: unknown) => {
    throw err instanceof ApiError && err.status === 404 ? objectNotFound(ref) : err;
  });
  // The bytes on a terminal's standard output leave no room for a bar beside them.
  const toTerminal = process.stdout.isTTY === true;
  const progress = transferProgress(`${shown(key)} -> -`, got.contentLength, { json: ctx.json || toTerminal });
  try {
    await pipeline(Readable.fromWeb(got.body as WebReadableStream), progress.counter(), process.stdout, { end: false });
  } finally {
    progress.stop();
  }
}

/**
 * Objects that would be written to one file (keys `a//b` and `a/b`; `A.pt` and `a.pt` where the file system ignores
 * case): the last written would be the one left. `cp` says so; `mv` refuses before anything moves, as it would delete
 * every one of them.
 */
export function sameFiles(files: { object: ObjectInfo; file: string }[], opts: CopyOptions) {
  const caseless = process.platform === 'darwin' || process.platform === 'win32';
  const byFile = new Map<string, string[]>();
  for (const { object, file } of files) {
    const name = caseless ? file.normalize('NFC').toLowerCase() : file;
    const keys = byFile.get(name);
    if (keys) keys.push(object.key);
    else byFile.set(name, [object.key]);
  }
  const clashes = [...byFile.entries()].filter(([, keys]) => keys.length > 1);
  if (clashes.length === 0) return;
  const said = clashes.map(([file, keys]) => `${keys.map(shown).join(' and ')} -> ${file}`).join('; ');
  if (opts.removeSource) throw new UsageError(`objects would be written to the same file (${said}): nothing moved`);
  process.stderr.write(`gpu: objects written to the same file, the last one kept: ${said}\n`);
}

/**
 * A remote folder's objects under a local folder, as `aws s3 cp --recursive` writes them: `to` is the copy (made when
 * not there; each object at its key past the prefix), so a copy run again after an interruption writes the same files.
 */
async function downloadFolder(
  ctx: Context,
  prefix: string,
  objects: ObjectInfo[],
  root: string,
  opts: CopyOptions,
): Promise<Downloaded[]> {
  const files: { object: ObjectInfo; file: string }[] = [];
  const folders = new Set<string>([root]);
  /** Folder markers (keys ending in `/`, as some tools store): each a folder, moved once it is made. */
  const markers: ObjectInfo[] = [];
  for (const object of objects) {
    const relative = object.key.slice(prefix.length);
    if (!isCopied(opts.filters ?? [], relative)) continue;
    // The prefix's own marker: the folder itself.
    const file = relative === '' ? root : fileUnder(root, relative);
    if (file === undefined) throw new Error(`${shown(object.key)} cannot be written under ${root}: its key leaves it`);
    if (relative === '' || relative.endsWith('/')) {
      folders.add(file);
      markers.push(object);
    } else {
      folders.add(path.dirname(file));
      files.push({ object, file });
    }
  }
  sameFiles(files, opts);
  for (const folder of folders) await locally('write', folder, () => mkdir(folder, { recursive: true }));
  for (const marker of markers) await opts.removeSource?.({ key: marker.key, etag: marker.etag });
  const total = files.reduce((sum, f) => sum + f.object.size, 0);
  const progress = transferProgress(`${shown(prefix)} -> ${root} (${files.length} files)`, total, { json: ctx.json });
  const copies = files.map((f) => ({ ...f, from: shown(f.object.key), to: f.file }));
  const written = await copyEach(ctx, copies, progress, { what: shown(prefix), done: 'written' }, async (f) => {
    const { object, file } = f;
    const version = { size: object.size, etag: object.etag, lastModified: object.last_modified };
    await downloadFile(ctx, refOf(object.key, opts.bucket), file, progress, version);
    await opts.removeSource?.({ key: object.key, etag: object.etag });
    return { key: object.key, file, size: object.size };
  });
  process.stderr.write(`${shown(prefix)} -> ${root} (${files.length} files, ${total} bytes)\n`);
  return written;
}
