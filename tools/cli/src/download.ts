/**
 * `gpu storage cp gpu:<key> <file>`: an object written to a temporary file beside the target,
 * `.<name>.<tag>.gpu-download` (`.gpu-<hash of the name>.<tag>.gpu-download` for a name too long for that), and
 * renamed over the target once whole: an interrupted download (a lost connection,
 * Ctrl-C, a crash) never leaves a part of the object under the target's name. The same command run again finds the
 * bytes kept and asks only for the rest (an HTTP `Range` from where they end). The tag is a hash of the object's key,
 * size and ETag (or modification time): bytes kept of an object that changed since are never joined to the new one's,
 * and such a stale temporary file of the same target is removed. Each response's ETag is checked against the one the
 * download started from; an object that changes under it starts over (once).
 */
import { createHash } from 'node:crypto';
import { type FileHandle, mkdir, open, readdir, rename, stat, unlink } from 'node:fs/promises';
import path from 'node:path';
import { ApiError, type ObjectRef } from '@gpu/client';
import type { Context } from './cli.ts';
import { isFileSystemError, isUnreachable, localError, locally } from './local-errors.ts';
import type { Progress } from './progress.ts';
import { objectNotFound, shown } from './storage-paths.ts';

/** What a download needs to know of an object before it starts (from a HEAD or a listing). */
export interface ObjectVersion {
  size: number;
  etag: string | null;
  lastModified: string | null;
  contentType?: string | null;
}

const SUFFIX = '.gpu-download';
/** The longest file name in bytes (Linux's and macOS's NAME_MAX). */
const NAME_MAX = 255;
/** What a temporary file's name adds to its stem: `.`, `.<tag>` and the suffix. */
const ADDED = 1 + 13 + SUFFIX.length;

/**
 * The stem of `file`'s temporary files: its name, or for a name too long to take what is added to it (a key's last
 * segment of 230 bytes, which storage holds), `gpu-<hash of the name>`.
 */
function stemOf(file: string): string {
  const name = path.basename(file);
  if (Buffer.byteLength(name) + ADDED <= NAME_MAX) return name;
  return `gpu-${createHash('sha256').update(name).digest('hex').slice(0, 32)}`;
}

/** The temporary file a download of this version of the object to `file` is written to. */
function temporaryFile(file: string, ref: ObjectRef, version: ObjectVersion): string {
  const tag = createHash('sha256')
    .update(JSON.stringify([ref.bucket ?? '', ref.key, version.size, version.etag ?? version.lastModified]))
    .digest('hex')
    .slice(0, 12);
  return path.join(path.dirname(file), `.${stemOf(file)}.${tag}${SUFFIX}`);
}

/** Removes the temporary files of earlier downloads to `file` but `keep` (of an object since changed). */
async function removeStale(file: string, keep: string) {
  const base = `.${stemOf(file)}.`;
  const names = await readdir(path.dirname(file)).catch(() => [] as string[]);
  for (const name of names) {
    const rest = name.startsWith(base) ? name.slice(base.length) : '';
    if (/^[0-9a-f]{12}\.gpu-download$/.test(rest) && name !== path.basename(keep)) {
      await unlink(path.join(path.dirname(file), name)).catch(() => {});
    }
  }
}

/** An object's version from a HEAD; a missing one said with the user's path. */
export async function headOf(ctx: Context, ref: ObjectRef): Promise<ObjectVersion> {
  try {
    const head = await ctx.objects.head(ref);
    return {
      size: head.contentLength ?? 0,
      etag: head.etag,
      lastModified: head.lastModified?.toISOString() ?? null,
      contentType: head.contentType ?? null,
    };
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) throw objectNotFound(ref);
    throw err;
  }
}

/** The object changed between its HEAD (or listing) and the bytes' answer. */
class ChangedUnderway extends Error {
  constructor(ref: ObjectRef) {
    super(`${shown(ref.key)} changed while it was downloaded: copy it again`);
  }
}

/**
 * Downloads the object to `file` through its temporary file, resuming one kept from an earlier run; `version` is the
 * object's as a listing gave it (else a HEAD asks).
 */
export async function downloadFile(
  ctx: Context,
  ref: ObjectRef,
  file: string,
  progress: Progress,
  version?: ObjectVersion,
): Promise<void> {
  try {
    return await downloadVersion(ctx, ref, file, progress, version ?? (await headOf(ctx, ref)));
  } catch (err) {
    if (!(err instanceof ChangedUnderway)) throw err;
    return downloadVersion(ctx, ref, file, progress, await headOf(ctx, ref));
  }
}

async function downloadVersion(
  ctx: Context,
  ref: ObjectRef,
  file: string,
  progress: Progress,
  version: ObjectVersion,
): Promise<void> {
  const temp = temporaryFile(file, ref, version);
  // Its folders made as needed, as `aws s3 cp` makes them (a file where one should be: the open below says so).
  await locally('write', file, () =>
    mkdir(path.dirname(file), { recursive: true }).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'EEXIST') throw err;
    }),
  );
  await removeStale(file, temp);
  const handle = await locally('write', file, () => open(temp, 'a'));
  let kept = 0;
  try {
    kept = (await handle.stat()).size;
    if (kept > version.size) {
      await handle.truncate(0);
      kept = 0;
    }
    if (kept > 0) {
      progress.say(`resuming download of ${shown(ref.key)}: ${kept} of ${version.size} bytes already here\n`);
    }
    if (kept < version.size) await fetchRest(ctx, ref, handle, kept, version, progress);
  } catch (err) {
    await handle.close().catch(() => {});
    throw await interrupted(err, ref, file, temp, version);
  }
  await handle.close();
  await locally('write', file, () => rename(temp, file));
}

/** Writes the object's bytes from `from` on (the whole object when the store answers with all of it). */
async function fetchRest(
  ctx: Context,
  ref: ObjectRef,
  handle: FileHandle,
  from: number,
  version: ObjectVersion,
  progress: Progress,
) {
  const got = await ctx.objects.download(ref, from > 0 ? { range: { start: from } } : {});
  if (version.etag && got.etag && got.etag !== version.etag) {
    await got.body.cancel().catch(() => {});
    await handle.truncate(0);
    throw new ChangedUnderway(ref);
  }
  const start = got.status === 206 ? Number(/^bytes (\d+)-/.exec(got.contentRange ?? '')?.[1] ?? -1) : 0;
  if (start !== from) {
    if (start !== 0) {
      await got.body.cancel().catch(() => {});
      throw new Error(`the platform answered bytes from ${start} of ${shown(ref.key)}, not from ${from}`);
    }
    // The whole object came back (a store that ignores Range): what was kept is written again.
    await handle.truncate(0);
  }
  progress.add(start);
  // The handle is opened to append: each write lands after the last, from `start` on. Each chunk is written before
  // the next is read, so what arrived before a failure is on disk for the next run.
  for await (const chunk of got.body) {
    await handle.write(chunk);
    progress.add(chunk.length);
  }
  const size = (await handle.stat()).size;
  if (size !== version.size) {
    throw new Error(`the answer ended at ${size} of ${version.size} bytes`);
  }
}

/** What a failed download says: a local failure as one, else where it stopped and how to go on. */
async function interrupted(err: unknown, ref: ObjectRef, file: string, temp: string, version: ObjectVersion) {
  const kept = await stat(temp).then(
    (s) => s.size,
    () => 0,
  );
  if (kept === 0) await unlink(temp).catch(() => {});
  if (err instanceof ApiError) return err.status === 404 ? objectNotFound(ref) : err;
  // No connection at all: the platform out of reach, said as such (what was kept stays for the next run).
  if (isUnreachable(err)) return err;
  if (err instanceof ChangedUnderway) return err;
  if (isFileSystemError(err)) return localError(err, 'write', file);
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  const why = cause?.code ?? cause?.message ?? (err as Error).message;
  return new Error(
    `the download of ${shown(ref.key)} broke off at ${kept} of ${version.size} bytes (${why}): run the same ` +
      'command again to resume it',
    { cause: err },
  );
}
