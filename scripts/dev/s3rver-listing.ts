/**
 * s3rver 3.7 leaves out of a delimited listing (`delimiter=/`) every common prefix whose objects all lie two or more
 * levels below it: its walk of the bucket's folders stops at the first folder beneath a common prefix, so a folder
 * that holds only folders is never seen. A root listing of a bucket whose keys are all `users/{id}/...` (the
 * storage service's default bucket) came back empty, where S3 and MinIO answer `users/`.
 *
 * This adds the missing common prefixes to s3rver's own answer: for each folder at the delimiter's level that
 * s3rver did not report, it looks for one object key below it (after `startAfter`, under `prefix`), stopping at
 * the first, and reports the folder when it finds one. On a truncated page only prefixes before the page's last
 * key are added, as s3rver does: the next page reports the rest.
 */
import { readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import type S3rver from 's3rver';

/** What s3rver's filesystem store writes next to an object's bytes: `<name>._S3rver_object`. */
const OBJECT_SUFFIX = '._S3rver_object';
/** s3rver's own files and folders (metadata, uploads) carry this marker. */
const S3RVER_MARK = '._S3rver_';

interface ListOptions {
  delimiter?: string;
  startAfter?: string;
  prefix?: string;
  maxKeys?: number;
}

interface ListResult {
  objects: Array<{ key: string }>;
  commonPrefixes: string[];
  isTruncated: boolean;
}

interface ListingStore {
  getBucketPath(bucket: string): string;
  listObjects(bucket: string, options: ListOptions): Promise<ListResult>;
}

/** Whether the folder holds an object whose key (the folder's key prefix + its path) is after `startAfter`. */
function holdsObjectAfter(dir: string, keyPrefix: string, startAfter: string): boolean {
  for (const name of readdirSync(dir)) {
    const full = path.join(dir, name);
    if (statSync(full).isDirectory()) {
      if (name.includes(S3RVER_MARK)) continue;
      const sub = `${keyPrefix}${name}/`;
      // Every key below `sub` sorts before startAfter unless startAfter lies inside it or before it.
      if (sub < startAfter && !startAfter.startsWith(sub)) continue;
      if (holdsObjectAfter(full, sub, startAfter)) return true;
    } else if (name.endsWith(OBJECT_SUFFIX) && `${keyPrefix}${name.slice(0, -OBJECT_SUFFIX.length)}` > startAfter) {
      return true;
    }
  }
  return false;
}

/** Adds to `found` the common prefixes of a delimited listing that it lacks (their objects lie deeper down). */
function addNested(found: Set<string>, bucketPath: string, prefix: string, delimiter: string, startAfter: string) {
  const visit = (dir: string, keyPrefix: string) => {
    for (const name of readdirSync(dir)) {
      if (name.includes(S3RVER_MARK)) continue;
      const full = path.join(dir, name);
      if (!statSync(full).isDirectory()) continue;
      const key = `${keyPrefix}${name}/`;
      // Folders that neither hold the prefix nor lie inside it have nothing to list.
      if (!key.startsWith(prefix) && !prefix.startsWith(key)) continue;
      if (key.startsWith(prefix)) {
        const at = key.indexOf(delimiter, prefix.length);
        if (at !== -1) {
          const common = key.slice(0, at + delimiter.length);
          if (!found.has(common) && holdsObjectAfter(full, key, startAfter)) found.add(common);
          continue;
        }
      }
      visit(full, key);
    }
  };
  visit(bucketPath, '');
}

/** Makes an s3rver instance's delimited listings report every common prefix. */
export function addNestedCommonPrefixes(server: S3rver): void {
  const store = (server as unknown as { store: ListingStore }).store;
  const listObjects = store.listObjects.bind(store);
  store.listObjects = async (bucket, options) => {
    const result = await listObjects(bucket, options);
    const { delimiter, prefix = '', startAfter = '' } = options;
    if (!delimiter) return result;
    const prefixes = new Set(result.commonPrefixes);
    addNested(prefixes, store.getBucketPath(bucket), prefix, delimiter, startAfter);
    const last = result.isTruncated ? result.objects[result.objects.length - 1]?.key : undefined;
    const commonPrefixes = [...prefixes].filter(
      (p) => last === undefined || p < last || result.commonPrefixes.includes(p),
    );
    return { ...result, commonPrefixes: commonPrefixes.sort() };
  };
}
