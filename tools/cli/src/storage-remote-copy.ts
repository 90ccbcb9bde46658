/**
 * `gpu storage cp gpu:<key> gpu:<key>` and `cp -r gpu:<prefix>/ gpu:<prefix>/`: objects copied to other keys of yours
 * (or of `--bucket`) by the object store itself (storage's `POST /objects/copy`, as `aws s3 cp` has S3 copy between
 * two S3 paths): no byte passes through this machine, whatever the object's size. An object larger than one part
 * (`GPU_COPY_PART_SIZE`, 512 MiB) is copied part by part, resumably (storage-part-copy.ts): 4 parts at a time, one at a
 * time in a folder's copy. A remote folder's objects each go under the destination (the destination is the copy, as
 * `aws s3 cp --recursive` has it), 4 at a time (folder-copy.ts).
 */
import { ApiError, type ObjectInfo, type ObjectRef } from '@gpu/client';
import { type Context, UsageError } from './cli.ts';
import { isCopied } from './copy-filters.ts';
import type { ObjectVersion } from './download.ts';
import { copyEach } from './folder-copy.ts';
import { type Progress, transferProgress } from './progress.ts';
import { objectsUnder, objectVersion } from './storage-download.ts';
import { copyInParts, copyPartSize } from './storage-part-copy.ts';
import { asPrefix, copyKey, isPrefix, nothingUnder, objectNotFound, refOf, shown } from './storage-paths.ts';
import type { CopyOptions } from './storage-upload.ts';

/** Copies the object or (with -r) remote folder `from` to `to`: the objects stored. */
export async function copyWithin(ctx: Context, from: string, to: string, opts: CopyOptions): Promise<ObjectInfo[]> {
  if (opts.recursive) {
    const prefix = asPrefix(from);
    // Folder markers (keys ending in `/`, as some tools store) too: copied, and moved, as objects are. A folder of
    // markers alone is one only when named as a folder (`gpu:runs/`): `-r gpu:runs` of an object `runs` beside an
    // empty folder `runs/` copies the object.
    const objects = await objectsUnder(ctx, prefix, opts.bucket);
    if (objects.some((o) => !o.key.endsWith('/')) || (objects.length > 0 && isPrefix(from))) {
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
  const version = await objectVersion(ctx, from, opts);
  const progress = transferProgress(`${shown(from)} -> ${shown(key)}`, version.size, { json: ctx.json });
  try {
    const copied = await copyObject(ctx, refOf(from, opts.bucket), refOf(key, opts.bucket), progress, version, 4);
    await opts.removeSource?.({ key: from, etag: version.etag });
    return [copied];
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
  // A folder copied into itself is refused, as `cp -r dir dir/backup` is (run again, it would nest deeper). Into a
  // folder that holds it (`runs/out/` to `runs/`), each object goes up, unless one would be written over another
  // being copied (`runs/out/out/a` onto `runs/out/a`: which of the two `runs/a` got would depend on the order).
  if (into.startsWith(prefix)) {
    throw new UsageError(`${shown(prefix)} and ${shown(into)} overlap: copy a folder to one outside it`);
  }
  /** Where an object of the folder is copied to: its key past `prefix`, under `into`. */
  const destination = (key: string) => `${into}${key.slice(prefix.length)}`;
  const sources = new Set(objects.map((o) => o.key));
  const clash = objects.find((o) => sources.has(destination(o.key)));
  if (clash) {
    throw new UsageError(
      `${shown(clash.key)} would be copied onto ${shown(destination(clash.key))}, which is copied too: copy ${shown(prefix)} to a folder outside it`,
    );
  }
  const total = objects.reduce((sum, o) => sum + o.size, 0);
  const files = objects.filter((o) => !o.key.endsWith('/')).length;
  const progress = transferProgress(`${shown(prefix)} -> ${shown(into)} (${files} files)`, total, {
    json: ctx.json,
  });
  const copies = objects.map((o) => ({
    key: o.key,
    etag: o.etag,
    version: { size: o.size, etag: o.etag, lastModified: o.last_modified, contentType: o.content_type },
    from: shown(o.key),
    to: shown(destination(o.key)),
  }));
  return copyEach(ctx, copies, progress, { what: shown(prefix), done: 'stored' }, async (c) => {
    const to = refOf(destination(c.key), opts.bucket);
    const copied = await copyObject(ctx, refOf(c.key, opts.bucket), to, progress, c.version, 1);
    await opts.removeSource?.({ key: c.key, etag: c.etag });
    return copied;
  });
}

/**
 * One object to another key, copied by the store: in one request, the bar moving by its size once it is there, or
 * (larger than a part) part by part, `partsAtOnce` at a time.
 */
async function copyObject(
  ctx: Context,
  from: ObjectRef,
  to: ObjectRef,
  progress: Progress,
  version: ObjectVersion,
  partsAtOnce: number,
): Promise<ObjectInfo> {
  // The source's absence is said as `cp` says it; a missing bucket or a refusal as the service does.
  const said = (err: unknown): never => {
    throw err instanceof ApiError && err.status === 404 && err.code === 'OBJECT_NOT_FOUND' ? objectNotFound(from) : err;
  };
  if (version.etag && version.size > copyPartSize(ctx.env)) {
    const parts = copyInParts(ctx, from, { ...version, etag: version.etag }, to, progress, partsAtOnce);
    const parted = await parts.catch(said);
    // Larger than an upload may be: in one request, as before parts.
    if (parted) return parted;
  }
  const copied = await ctx.objects.copy(from, to).catch(said);
  progress.add(copied.size);
  return copied;
}
