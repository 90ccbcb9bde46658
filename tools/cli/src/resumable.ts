/**
 * `gpu storage cp` of a large file: a resumable upload (the storage service's `/uploads`), sent in parts of
 * `PART_SIZE`. Its ID is kept in the config directory's `uploads.json` (0600) under the file and the target, so the
 * same command run again after an interruption (a lost connection, Ctrl-C, a crash) asks the service which parts
 * arrived and sends only the rest. The file must be unchanged (the size and modification time it had when the upload
 * started): else the old upload is given up and a new one starts; a part kept from before whose ETag is an MD5 (S3,
 * MinIO, the dev server) must also have the MD5 of the file's bytes, else it is sent again; a file that changes while
 * it is sent is not joined. `PARTS_AT_ONCE` parts go at once, each read from the file as it is sent (never held
 * whole). A part that fails for a reason that may pass (a connection, the service or the store away) is sent again
 * twice, after a pause; a refusal, or a part that failed its three times, stops the others and ends the run. Two runs at once for different files keep
 * their uploads in one file and may lose each other's entry: such an upload is then not resumed, and expires.
 */
import { createHash } from 'node:crypto';
import { createReadStream, statSync } from 'node:fs';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { ApiError, type ObjectInfo, type ObjectRef } from '@gpu/client';
import { forEachLimited } from '@gpu/common/concurrency';
import type { Context } from './cli.ts';
import { readConfigFile, writeConfigFile } from './config.ts';
import { localError } from './local-errors.ts';
import type { Progress } from './progress.ts';

/** From this size on, `cp` uploads resumably. */
export const RESUMABLE_FROM = 64 * 1024 * 1024;
/** Bytes per part (the service's least is 5 MiB; a file of more than 10,000 parts gets larger ones). */
const PART_SIZE = 16 * 1024 * 1024;
/** The store's most parts of one upload. */
export const MAX_PARTS = 10_000;
const ATTEMPTS = 3;
/** Parts sent at once. */
const PARTS_AT_ONCE = 4;

/** An upload under way, as `uploads.json` keeps it. */
interface Pending {
  upload_id: string;
  size: number;
  mtime_ms: number;
  part_size: number;
}

const pendingKey = (file: string, ref: ObjectRef) => JSON.stringify([path.resolve(file), ref.bucket ?? '', ref.key]);

/**
 * Keeps (or, undefined, forgets) the upload under way of `key` in `uploads.json`: a file's (here), or a copy's
 * (storage-part-copy.ts).
 */
export function remember(ctx: Context, key: string, pending: object | undefined) {
  const all = readConfigFile<Record<string, object>>(ctx.env, 'uploads.json');
  if (pending) all[key] = pending;
  else delete all[key];
  writeConfigFile(ctx.env, 'uploads.json', all);
}

/** The upload under way of `key` kept in `uploads.json`, if any. */
export function remembered<T>(ctx: Context, key: string): T | undefined {
  return readConfigFile<Record<string, T>>(ctx.env, 'uploads.json')[key];
}

/** Whether a failure may pass if the part is sent again (not a refusal by the service). */
export function mayPass(err: unknown): boolean {
  return !(err instanceof ApiError) || err.status >= 500 || err.status === 408;
}

/** The upload to go on with: the one kept for this file and target if it is still there and the file unchanged. */
async function resumeOrStart(ctx: Context, file: string, ref: ObjectRef, key: string) {
  const { size, mtimeMs } = statSync(file);
  const kept = remembered<Pending>(ctx, key);
  if (kept) {
    if (kept.size === size && kept.mtime_ms === mtimeMs) {
      try {
        return { pending: kept, upload: await ctx.objects.uploads.get(kept.upload_id) };
      } catch (err) {
        // Gone (completed, aborted, expired): start over.
        if (!(err instanceof ApiError) || err.status !== 404) throw err;
      }
    } else {
      await ctx.objects.uploads.abort(kept.upload_id).catch(() => {});
    }
  }
  const upload = await ctx.objects.uploads.start(ref);
  if (size > upload.max_size) {
    await ctx.objects.uploads.abort(upload.upload_id).catch(() => {});
    throw new Error(`${file} has ${size} bytes, more than the platform takes (${upload.max_size})`);
  }
  const partSize = Math.max(PART_SIZE, Math.ceil(size / MAX_PARTS));
  const pending = { upload_id: upload.upload_id, size, mtime_ms: mtimeMs, part_size: partSize };
  remember(ctx, key, pending);
  return { pending, upload };
}

/** Uploads the file in parts, resuming an upload of it that was interrupted; the object made. */
export async function resumableUpload(
  ctx: Context,
  file: string,
  ref: ObjectRef,
  progress: Progress,
  /** false: the file will not be there again (standard input's): a failure aborts the upload, nothing kept. */
  resumable = true,
): Promise<ObjectInfo> {
  const key = pendingKey(file, ref);
  const { pending, upload } = await resumeOrStart(ctx, file, ref, key);
  const { size, part_size: partSize } = pending;
  const count = Math.max(1, Math.ceil(size / partSize));
  const lengthOf = (n: number) => Math.min(partSize, size - (n - 1) * partSize);
  // Parts that arrived whole before, with these bytes; any other part is sent (again).
  const stored = new Map<number, string>();
  for (const p of upload.parts) {
    if (p.part_number > count || p.size !== lengthOf(p.part_number)) continue;
    if (await sameBytes(file, (p.part_number - 1) * partSize, p.size, p.etag)) stored.set(p.part_number, p.etag);
  }
  if (stored.size > 0) {
    progress.say(`resuming upload ${upload.upload_id}: ${stored.size} of ${count} parts already stored\n`);
    progress.add([...stored.keys()].reduce((sum, n) => sum + lengthOf(n), 0));
  }
  const failure = await makeParts(count, stored, PARTS_AT_ONCE, (n, signal) =>
    sendPart(ctx, pending.upload_id, file, n, (n - 1) * partSize, lengthOf(n), progress, signal),
  );
  if (failure !== undefined) {
    if (resumable) {
      progress.say(
        `upload interrupted with ${stored.size} of ${count} parts stored: run the same command again to resume\n`,
      );
    } else {
      await ctx.objects.uploads.abort(pending.upload_id).catch(() => {});
      remember(ctx, key, undefined);
      progress.say('upload interrupted: nothing stored (standard input cannot be read again)\n');
    }
    throw localError(failure, 'read', file);
  }
  const now = statSync(file);
  if (now.size !== size || now.mtimeMs !== pending.mtime_ms) {
    await ctx.objects.uploads.abort(pending.upload_id).catch(() => {});
    remember(ctx, key, undefined);
    throw new Error(`${file} changed while it was being sent: nothing was stored; copy it again`);
  }
  const parts = [...stored.entries()].sort(([a], [b]) => a - b).map(([part_number, etag]) => ({ part_number, etag }));
  const info = await ctx.objects.uploads.complete(pending.upload_id, parts);
  remember(ctx, key, undefined);
  return info;
}

/**
 * Makes each of parts 1 to `count` not in `stored` (`make` answers its ETag, kept in `stored`), `atOnce` at a time;
 * the first failure stops the parts under way (their signal) and those not begun. Answers that failure, if any.
 */
export async function makeParts(
  count: number,
  stored: Map<number, string>,
  atOnce: number,
  make: (partNumber: number, signal: AbortSignal) => Promise<string>,
): Promise<unknown> {
  const missing = Array.from({ length: count }, (_, i) => i + 1).filter((n) => !stored.has(n));
  const stop = new AbortController();
  let failure: unknown;
  await forEachLimited(missing, atOnce, async (n) => {
    if (stop.signal.aborted) return;
    try {
      stored.set(n, await make(n, stop.signal));
    } catch (err) {
      failure ??= err;
      stop.abort();
    }
  });
  return failure;
}

/** Whether a stored part holds the file's bytes, when its ETag is their MD5 (true when it cannot tell). */
async function sameBytes(file: string, start: number, length: number, etag: string): Promise<boolean> {
  const md5 = /^"?([0-9a-f]{32})"?$/.exec(etag)?.[1];
  if (!md5) return true;
  const hash = createHash('md5');
  for await (const chunk of createReadStream(file, { start, end: start + length - 1 })) hash.update(chunk as Buffer);
  return hash.digest('hex') === md5;
}

async function sendPart(
  ctx: Context,
  uploadId: string,
  file: string,
  partNumber: number,
  start: number,
  length: number,
  progress: Progress,
  signal: AbortSignal,
): Promise<string> {
  return retried(signal, mayPass, async () => {
    const counted = progress.counter();
    // A file that cannot be read ends the part with its error (pipeline destroys what follows it).
    pipeline(createReadStream(file, { start, end: start + length - 1 }), counted).catch(() => {});
    try {
      const part = await ctx.objects.uploads.putPart(uploadId, partNumber, counted, { contentLength: length, signal });
      return part.etag;
    } catch (err) {
      progress.add(-counted.bytes);
      throw err;
    }
  });
}

/**
 * One part's request, made again up to `ATTEMPTS` times in all while its failure `passes` (and nothing stopped the
 * parts), after a pause of a second more each time.
 */
export async function retried<T>(
  signal: AbortSignal,
  passes: (err: unknown) => boolean,
  attempt: () => Promise<T>,
): Promise<T> {
  for (let n = 1; ; n++) {
    try {
      return await attempt();
    } catch (err) {
      if (n >= ATTEMPTS || !passes(err) || signal.aborted) throw err;
      await sleep(1000 * n);
    }
  }
}
