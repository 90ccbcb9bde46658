/**
 * Grants: presigned URLs to one user's objects, for a workload that runs for them on a provider's machine. Billing
 * (a platform service) asks for a session's inputs (read: GET URLs) and its logs and outputs (write: PUT URLs), and
 * hands them to the provider's daemon, which so never holds the user's token.
 *
 * The rules stay here, in storage: each entry is checked exactly as the user's own request for it would be
 * (`access.ts`: their buckets, their folder of the default bucket), every input must exist, and nothing is signed
 * unless every entry passes. A refusal names the entry (`read[1]: ...`). Whoever holds a URL can use that one
 * object, with that one method, until it expires.
 */
import { AppError, errors, forEachLimited, isRefusal, objectKeyProblem, type Principal } from '@gpu/common';
import { storageErrors } from '../errors.ts';
import type { ResolvedTarget, StorageAccess } from './access.ts';
import { storeKeyProblem } from './key-limits.ts';
import { existingObject, type Target } from './objects.ts';
import type { ObjectStore } from './store.ts';

/** An object a grant names: a full key in `bucket`; without one, a key in the user's folder of the default bucket. */
export interface GrantEntry {
  bucket?: string;
  key: string;
}

export interface GrantRequest {
  userId: string;
  read: readonly GrantEntry[];
  write: readonly GrantEntry[];
  expirySeconds: number;
}

/** A granted object, named as its entry named it (the bucket filled in), and its URL. */
interface GrantedObject extends Target {
  url: string;
}

export interface Grant {
  /** In request order, with each object's size in bytes. */
  read: Array<GrantedObject & { size: number }>;
  write: GrantedObject[];
  /** When the URLs stop working (at the latest). */
  expiresAt: Date;
}

export interface GrantDeps {
  store: ObjectStore;
  access: StorageAccess;
  /** The shared bucket of bucket-less entries ('' when none). */
  defaultBucket: string;
  /** `object_store.max_key_segment_bytes`: the store's limit of a key's segment (`key-limits.ts`). */
  maxSegmentBytes: number;
}

/** HEAD requests in flight while checking that the inputs exist. */
const HEAD_CONCURRENCY = 16;

interface Item {
  /** `read[1]`, `write[0]`: the entry, for a refusal's detail. */
  label: string;
  entry: GrantEntry;
  target: ResolvedTarget;
}

/** The user as their own requests reach storage: a user in their own folder and buckets, never privileged. */
function asUser(userId: string): Principal {
  return { subject: userId, kind: 'user', roles: ['renter'], actsFor: userId, tokenId: 'grant' };
}

/** A refusal with the entry it is about in front of its detail; a failure (the store away) as it is. */
function aboutEntry(label: string, err: unknown): unknown {
  if (!isRefusal(err)) return err;
  return new AppError(err.kind, err.code, `${label}: ${err.message}`, {
    errors: err.errors,
    headers: err.headers,
    extra: err.extra,
    cause: err,
  });
}

/** Checks every entry as the user, then signs a URL for each: all of them, or none. */
export async function grantUrls(deps: GrantDeps, req: GrantRequest): Promise<Grant> {
  const user = asUser(req.userId);
  const resolve = (list: 'read' | 'write') => (entry: GrantEntry, i: number) => {
    const label = `${list}[${i}]`;
    if (entry.bucket !== undefined)
      return { label, entry, target: { bucket: entry.bucket, key: entry.key, folder: '' } };
    if (!deps.defaultBucket) throw aboutEntry(label, storageErrors.noDefaultBucket());
    return { label, entry, target: deps.access.defaultTarget(user, deps.defaultBucket, entry.key) };
  };
  const reads: Item[] = req.read.map(resolve('read'));
  const writes: Item[] = req.write.map(resolve('write'));
  // The store's key is the user's folder and the key: the store must be able to hold it (1024 bytes, and each segment's
  // limit), or it refuses the URL's request later. Checked for every entry before the store is asked anything.
  for (const item of [...reads, ...writes]) {
    const problem =
      objectKeyProblem(item.target.key) ?? storeKeyProblem(item.target.key, deps.maxSegmentBytes, item.target.folder);
    if (problem) {
      throw errors.validation(`${item.label}: the stored key ${problem}`, [
        { path: `body.${item.label.replace('[', '.').replace(']', '')}.key`, message: `the stored key ${problem}` },
      ]);
    }
  }

  // One at a time, in request order, so the refusal names the first entry refused; a bucket's owner is read once.
  for (const item of [...reads, ...writes]) {
    await deps.access.assertMayUse(user, item.target.bucket, item.target.key).catch((err: unknown) => {
      throw aboutEntry(item.label, err);
    });
  }
  const sizes = await sizesOf(deps.store, reads);

  const expiresAt = new Date(Date.now() + req.expirySeconds * 1000);
  const sign = (item: Item, method: 'GET' | 'PUT') =>
    deps.store.presign(item.target.bucket, item.target.key, method, req.expirySeconds);
  const [readUrls, writeUrls] = await Promise.all([
    Promise.all(reads.map((item) => sign(item, 'GET'))),
    Promise.all(writes.map((item) => sign(item, 'PUT'))),
  ]);
  const named = (item: Item) => ({ bucket: item.target.bucket, key: item.entry.key });
  return {
    read: reads.map((item, i) => ({ ...named(item), url: readUrls[i]!, size: sizes[i]! })),
    write: writes.map((item, i) => ({ ...named(item), url: writeUrls[i]! })),
    expiresAt,
  };
}

/** Each input's size, from a HEAD at the store; the first entry (in request order) that is missing is refused. */
async function sizesOf(store: ObjectStore, items: readonly Item[]): Promise<number[]> {
  const sizes: number[] = [];
  const failures = new Map<number, unknown>();
  await forEachLimited(items, HEAD_CONCURRENCY, async (item, i) => {
    try {
      sizes[i] = (await existingObject(store, item.target)).contentLength;
    } catch (err) {
      failures.set(i, err);
    }
  });
  if (failures.size > 0) {
    const first = Math.min(...failures.keys());
    throw aboutEntry(items[first]!.label, failures.get(first));
  }
  return sizes;
}
