/**
 * Object operations and their rules:
 * - an upload answers the stored object as the store describes it afterwards (size, ETag, content type), and so
 *   does a copy, which the store makes itself;
 * - DELETE of a missing object is OBJECT_NOT_FOUND (S3 answers 204 either way), and of an object in a missing
 *   bucket BUCKET_NOT_FOUND, as every other route answers;
 * - a 304 carries the validators (ETag, Last-Modified) RFC 9110 asks for, fetched when the store left them out.
 * - a download by redirect hands out a presigned GET URL valid for `REDIRECT_EXPIRY_SECONDS`, once the object is
 *   known to exist (a missing object or bucket answers as a download would, not with the store's XML error).
 * Reads pass straight through to the store (their conditions: `read-rules.ts`).
 */
import { ifMatchHolds, isAppError } from '@gpu/common';
import { storageErrors } from '../errors.ts';
import type {
  NotModified,
  ObjectBody,
  ObjectEntry,
  ObjectHead,
  ObjectStore,
  ReadConditions,
  UploadRequest,
} from './store.ts';

/** Where an object lives. */
export interface Target {
  bucket: string;
  key: string;
}

/** Stores an upload and describes the object stored. */
export async function uploadObject(store: ObjectStore, req: UploadRequest): Promise<ObjectEntry> {
  // The catalogued store read the object back to catalogue it; only a bare store is asked again.
  const head = (await store.upload(req)) ?? (await store.head(req.bucket, req.key, {}));
  return entryOf(req.key, head);
}

function entryOf(key: string, head: ObjectHead): ObjectEntry {
  return {
    key,
    size: head.contentLength,
    lastModified: head.lastModified,
    contentType: head.contentType,
    etag: head.etag,
    isPrefix: false,
  };
}

/**
 * Copies `source` to `destination` at the store (no byte through the service) and describes the copy; an object is
 * not copied onto itself.
 */
export async function copyObject(
  store: ObjectStore,
  copy: { source: Target; destination: Target; until: Date; signal?: AbortSignal },
): Promise<ObjectEntry> {
  const { source, destination } = copy;
  if (source.bucket === destination.bucket && source.key === destination.key) throw storageErrors.copyOntoItself();
  const head = (await store.copy(copy)) ?? (await store.head(destination.bucket, destination.key, {}));
  return entryOf(destination.key, head);
}

/** The object's bytes (or the range asked for), or `NotModified`. */
export function readObject(
  store: ObjectStore,
  target: Target,
  cond: ReadConditions,
  signal?: AbortSignal,
): Promise<ObjectBody> {
  return store.get(target.bucket, target.key, cond, signal);
}

/**
 * How long the URL of a download by redirect is valid: enough for a client to follow it (and to resume with a Range
 * request soon after), short because whoever holds it may read the object. A transfer that has started goes on
 * past it.
 */
export const REDIRECT_EXPIRY_SECONDS = 300;

/** A presigned GET URL of an object that exists, for a client to download it straight from the store. */
export async function downloadUrl(store: ObjectStore, target: Target): Promise<string> {
  await existingObject(store, target);
  return store.presign(target.bucket, target.key, 'GET', REDIRECT_EXPIRY_SECONDS);
}

/** The object's headers, or `NotModified`. */
export function headObject(store: ObjectStore, target: Target, cond: ReadConditions): Promise<ObjectHead> {
  return store.head(target.bucket, target.key, cond);
}

/**
 * The headers of an object that must exist: a missing one is OBJECT_NOT_FOUND, or BUCKET_NOT_FOUND when its bucket
 * is missing too.
 */
export async function existingObject(store: ObjectStore, target: Target): Promise<ObjectHead> {
  try {
    return await store.head(target.bucket, target.key, {});
  } catch (err) {
    // A HEAD's 404 has no body to tell a missing key from a missing bucket: ask about the bucket then.
    if (isAppError(err) && err.code === 'OBJECT_NOT_FOUND') await store.bucketMustExist(target.bucket);
    throw err;
  }
}

/**
 * Deletes an object that must exist. With `ifMatch` (`If-Match`: `*` or ETags), only while it is the object named:
 * else 412 OBJECT_CHANGED and it stays. The check is the object's HEAD, and the store's delete is sent with the ETag
 * found, so that a store with conditional deletes (S3, the dev server) keeps an object replaced in between too.
 */
export async function deleteObject(store: ObjectStore, target: Target, opts: { ifMatch?: string } = {}): Promise<void> {
  const head = await existingObject(store, target);
  if (opts.ifMatch === undefined) return store.delete(target.bucket, target.key);
  if (!ifMatchHolds(opts.ifMatch, head.etag)) throw storageErrors.objectChanged();
  try {
    // `*`: whatever object is there; else the very one checked.
    await store.delete(target.bucket, target.key, { ifMatch: opts.ifMatch.trim() === '*' ? '*' : head.etag });
  } catch (err) {
    // Replaced between the HEAD and the delete (a store with conditional deletes said so).
    if (isAppError(err) && err.code === 'PRECONDITION_FAILED') throw storageErrors.objectChanged();
    throw err;
  }
}

/** The validators of a 304: those the store sent, else the object's own. */
export async function notModifiedValidators(
  store: ObjectStore,
  target: Target,
  err: NotModified,
): Promise<{ etag?: string; lastModified?: string }> {
  let { etag, lastModified } = err;
  if (!etag || !lastModified) {
    const head = await store.head(target.bucket, target.key, {});
    etag ??= head.etag;
    lastModified ??= head.lastModified?.toUTCString();
  }
  return { etag, lastModified };
}
