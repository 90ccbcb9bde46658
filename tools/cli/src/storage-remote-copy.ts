/**
 * `gpu storage cp gpu:<key> gpu:<key>` and `cp -r gpu:<prefix>/ gpu:<prefix>/`: objects copied to other keys of yours
 * (or of `--bucket`) through this machine, the storage service having no copy of its own: each read and written as
 * one stream of its length (the service takes a body of known length up to its `max_upload_size` in one request),
 * nothing kept here, so a copy cut off is copied again from its start. A remote folder's objects each go under the
 * destination (the destination is the copy, as `aws s3 cp --recursive` has it), 4 at a time (folder-copy.ts).
 */
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { ApiError, type ObjectInfo, type ObjectRef } from '@gpu/client';
import { type Context, UsageError } from './cli.ts';
import { isCopied } from './copy-filters.ts';
import { copyEach } from './folder-copy.ts';
import { isUnreachable } from './local-errors.ts';
import { type Progress, transferProgress } from './progress.ts';
import { objectsUnder, objectVersion } from './storage-download.ts';
import { asPrefix, copyKey, isPrefix, nothingUnder, objectNotFound, refOf, shown } from './storage-paths.ts';
import type { CopyOptions } from './storage-upload.ts';

/** Copies the object or (with -r) remote folder `from` to `to`: the objects stored. */
export async function copyWithin(ctx: Context, from: string, to: string, opts: CopyOptions): Promise<ObjectInfo[]> {
  if (opts.recursive) {
    const prefix = asPrefix(from);
    const objects = (await objectsUnder(ctx, prefix, opts.bucket)).filter((o) => !o.key.endsWith('/'));
    if (objects.length > 0) {
      const copied = objects.filter((o) => isCopied(opts.filters ?? [], o.key.slice(prefix.length)));
      return copyFolder(ctx, prefix, copied, asPrefix(to), opts);
    }
    // `cp -r` of an object copies the object.
    if (isPrefix(from)) throw nothingUnder(from);
  } else if (isPrefix(from)) {
    throw new UsageError(`${shown(from)} is a folder: copy it with -r`);
  }
  const key = copyKey(from, to);
  if (key === from) throw new UsageError(`${shown(from)} would be copied onto itself`);
  const progress = transferProgress(`${shown(from)} -> ${shown(key)}`, (await objectVersion(ctx, from, opts)).size, {
    json: ctx.json,
  });
  try {
    return [await copyObject(ctx, refOf(from, opts.bucket), refOf(key, opts.bucket), progress)];
  } finally {
    progress.stop();
  }
}

/** A remote folder's objects, each under `into` at its key past `prefix`. */
async function copyFolder(
  ctx: Context,
  prefix: string,
  objects: ObjectInfo[],
  into: string,
  opts: CopyOptions,
): Promise<ObjectInfo[]> {
  // A folder copied into itself, or into one that holds it, would read what it writes (and a run again nest deeper).
  if (into.startsWith(prefix) || prefix.startsWith(into)) {
    throw new UsageError(`${shown(prefix)} and ${shown(into)} overlap: copy a folder to one outside it`);
  }
  const total = objects.reduce((sum, o) => sum + o.size, 0);
  const progress = transferProgress(`${shown(prefix)} -> ${shown(into)} (${objects.length} files)`, total, {
    json: ctx.json,
  });
  const copies = objects.map((o) => ({
    key: o.key,
    from: shown(o.key),
    to: shown(`${into}${o.key.slice(prefix.length)}`),
  }));
  return copyEach(ctx, copies, progress, { what: shown(prefix), done: 'stored' }, (c) =>
    copyObject(ctx, refOf(c.key, opts.bucket), refOf(`${into}${c.key.slice(prefix.length)}`, opts.bucket), progress),
  );
}

/** One object to another key, as one stream. */
async function copyObject(ctx: Context, from: ObjectRef, to: ObjectRef, progress: Progress): Promise<ObjectInfo> {
  // The source's download ends with the copy, however it ends (a refused upload must not leave it open).
  const source = new AbortController();
  const got = await ctx.objects.download(from, { signal: source.signal }).catch((err: unknown) => {
    throw err instanceof ApiError && err.status === 404 ? objectNotFound(from) : err;
  });
  const counted = progress.counter();
  // A download that breaks off ends the upload with its error (pipeline destroys what follows it).
  let broke: Error | undefined;
  pipeline(Readable.fromWeb(got.body as WebReadableStream), counted).catch((err: Error) => {
    broke = err;
  });
  const length = got.contentLength;
  try {
    // Of a known length (the service answers with it), else sent chunked; the source's content type kept.
    return await ctx.objects.upload(to, counted, {
      ...(length === null ? {} : { contentLength: length }),
      ...(got.contentType ? { contentType: got.contentType } : {}),
    });
  } catch (err) {
    // A refusal is the service's, and a platform out of reach said as such; a stream cut either way is said as one.
    if (err instanceof ApiError || isUnreachable(err)) throw err;
    const why = broke ?? ((err as Error).cause as Error | undefined) ?? (err as Error);
    // Cut before all of it was sent, the service stored nothing; after, only its answer may have been lost.
    const stored =
      length !== null && counted.bytes < length
        ? 'nothing stored there'
        : `it may have been stored: gpu storage ls ${shown(to.key)} shows`;
    throw new Error(
      `the copy of ${shown(from.key)} to ${shown(to.key)} broke off at ${counted.bytes} of ${length ?? '?'} bytes ` +
        `(${why.message}): ${stored}; run the same command again`,
    );
  } finally {
    source.abort();
    counted.destroy();
  }
}
