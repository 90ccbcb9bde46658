/**
 * A large object copied between two `gpu:` paths part by part: a resumable upload to the destination whose parts the
 * store copies from byte ranges of the source (storage's `POST /uploads/{id}/parts/{n}/copy`), every part of the
 * version the copy began with. Each request is one part's (`GPU_COPY_PART_SIZE`, 512 MiB by default), so no gateway's
 * time limit for an answer cuts a copy of many GiB, and no byte passes through this machine. As a file's upload
 * (resumable.ts), the copy is kept in the config directory's `uploads.json` under its source and destination: the
 * same command run again after an interruption copies only the parts missing, if the source is still that version
 * (else the old upload is given up and the copy starts over). A part that fails for a reason that may pass is copied
 * again twice, after a pause, and the copy stays to be resumed; one refused (the source replaced or gone, the upload
 * given up) gives the copy up. An object larger than the platform's `max_upload_size` is no upload's: it is copied in
 * one request (storage-remote-copy.ts).
 */
import { ApiError, type ObjectInfo, type ObjectRef } from '@gpu/client';
import { type Context, UsageError } from './cli.ts';
import type { ObjectVersion } from './download.ts';
import type { Progress } from './progress.ts';
import { MAX_PARTS, makeParts, mayPass, remember, remembered, retried } from './resumable.ts';
import { shown } from './storage-paths.ts';

const MiB = 1024 * 1024;
/** Bytes per part: each a short request, still few parts (a 1 TiB object has 2,048). */
const PART_SIZE = 512 * MiB;
/** The store's least part (but the last) and largest one. */
const MIN_PART_SIZE = 5 * MiB;
const MAX_PART_SIZE = 5 * 1024 * MiB;

/** A copy under way, as `uploads.json` keeps it. */
interface PendingCopy {
  upload_id: string;
  size: number;
  etag: string;
  part_size: number;
}

/** The bytes of a part: `GPU_COPY_PART_SIZE` (5 MiB to 5 GiB), else 512 MiB. */
export function copyPartSize(env: NodeJS.ProcessEnv): number {
  const given = env.GPU_COPY_PART_SIZE;
  if (given === undefined || given === '') return PART_SIZE;
  const size = /^\d+$/.test(given) ? Number(given) : Number.NaN;
  if (!(size >= MIN_PART_SIZE && size <= MAX_PART_SIZE)) {
    throw new UsageError(`GPU_COPY_PART_SIZE must be bytes from ${MIN_PART_SIZE} to ${MAX_PART_SIZE}, not ${given}`);
  }
  return size;
}

const pendingKey = (from: ObjectRef, to: ObjectRef) =>
  JSON.stringify(['copy', from.bucket ?? '', from.key, to.bucket ?? '', to.key]);

/**
 * The upload to go on with: the one kept for this copy, if the source is still that version and it is still there;
 * null when the source is larger than an upload may be.
 */
async function resumeOrStart(
  ctx: Context,
  from: ObjectRef,
  to: ObjectRef,
  version: { size: number; etag: string; contentType: string | null | undefined },
) {
  const key = pendingKey(from, to);
  const kept = remembered<PendingCopy>(ctx, key);
  if (kept) {
    if (kept.etag === version.etag && kept.size === version.size) {
      try {
        return { key, pending: kept, upload: await ctx.objects.uploads.get(kept.upload_id) };
      } catch (err) {
        // Gone (completed, aborted, expired): start over.
        if (!(err instanceof ApiError) || err.status !== 404) throw err;
      }
    } else {
      await ctx.objects.uploads.abort(kept.upload_id).catch(() => {});
    }
  }
  // The source's content type, as a copy in one request keeps it (a folder's listing does not tell it).
  const contentType = version.contentType ?? (await ctx.objects.head(from)).contentType;
  const upload = await ctx.objects.uploads.start(to, contentType ? { contentType } : {});
  if (version.size > upload.max_size) {
    await ctx.objects.uploads.abort(upload.upload_id).catch(() => {});
    return null;
  }
  const partSize = Math.max(copyPartSize(ctx.env), Math.ceil(version.size / MAX_PARTS));
  const pending = { upload_id: upload.upload_id, size: version.size, etag: version.etag, part_size: partSize };
  remember(ctx, key, pending);
  return { key, pending, upload };
}

/**
 * Copies `from` (of `version`) to `to` in parts the store copies, `partsAtOnce` at a time, resuming a copy of it that
 * was interrupted; the object made, or undefined for an object larger than an upload may be (nothing done).
 */
export async function copyInParts(
  ctx: Context,
  from: ObjectRef,
  version: ObjectVersion & { etag: string },
  to: ObjectRef,
  progress: Progress,
  partsAtOnce: number,
): Promise<ObjectInfo | undefined> {
  const started = await resumeOrStart(ctx, from, to, {
    size: version.size,
    etag: version.etag,
    contentType: version.contentType,
  });
  if (started === null) return undefined;
  const { key, pending, upload } = started;
  const { size, part_size: partSize } = pending;
  const count = Math.max(1, Math.ceil(size / partSize));
  const lengthOf = (n: number) => Math.min(partSize, size - (n - 1) * partSize);
  // Parts copied before (of this version: each was copied naming its ETag) are kept.
  const stored = new Map<number, string>();
  for (const p of upload.parts) {
    if (p.part_number <= count && p.size === lengthOf(p.part_number)) stored.set(p.part_number, p.etag);
  }
  if (stored.size > 0) {
    progress.say(`resuming copy ${upload.upload_id}: ${stored.size} of ${count} parts already copied\n`);
    progress.add([...stored.keys()].reduce((sum, n) => sum + lengthOf(n), 0));
  }
  const failure = await makeParts(count, stored, partsAtOnce, async (n, signal) => {
    const range = { start: (n - 1) * partSize, end: (n - 1) * partSize + lengthOf(n) - 1 };
    const etag = await copyPart(ctx, pending, from, n, range, signal);
    progress.add(lengthOf(n));
    return etag;
  });
  if (failure !== undefined) {
    if (mayPass(failure) || (failure instanceof ApiError && failure.status === 429)) {
      progress.say(
        `copy interrupted with ${stored.size} of ${count} parts copied: run the same command again to resume\n`,
      );
      throw failure;
    }
    // Refused: no run again would go on with it (the source replaced or gone, the upload given up).
    await ctx.objects.uploads.abort(pending.upload_id).catch(() => {});
    remember(ctx, key, undefined);
    if (failure instanceof ApiError && failure.code === 'SOURCE_CHANGED') {
      throw new Error(`${shown(from.key)} was replaced while it was copied: nothing was stored; copy it again`);
    }
    throw failure;
  }
  const parts = [...stored.entries()].sort(([a], [b]) => a - b).map(([part_number, etag]) => ({ part_number, etag }));
  const info = await ctx.objects.uploads.complete(pending.upload_id, parts);
  remember(ctx, key, undefined);
  return info;
}

/** One part copied by the store, again after a failure that may pass; its ETag. */
async function copyPart(
  ctx: Context,
  pending: PendingCopy,
  from: ObjectRef,
  partNumber: number,
  range: { start: number; end: number },
  signal: AbortSignal,
): Promise<string> {
  // Busy (the user's copies at once at an instance): a pause, as any failure that may pass.
  const passes = (err: unknown) => (err instanceof ApiError && err.status === 429) || mayPass(err);
  const part = await retried(signal, passes, () =>
    ctx.objects.uploads.copyPart(pending.upload_id, partNumber, from, { range, sourceEtag: pending.etag, signal }),
  );
  return part.etag;
}
