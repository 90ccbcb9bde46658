/**
 * Which bucket and key a request names. The rule, matching Go's ServeMux
 * precedence that the spec's routes come from:
 *   /objects/{bucket}/list         GET lists {bucket}             (literal "list" wins)
 *   /objects/list                  GET lists the default bucket
 *   /objects/{bucket}/{key...}     two or more segments: the first is the bucket
 *   /objects/{key}                 exactly one segment: a key in the default bucket
 * So a default-bucket key cannot contain "/" through the short route (name the
 * bucket instead), and an object whose key is exactly "list" at a bucket's top
 * level can be written, read by HEAD and deleted, but GET of it lists the bucket.
 */
import type { StorageConfig } from '../config.ts';
import { assertBucketName, assertObjectKey } from '../domain/names.ts';
import { storageErrors } from '../errors.ts';

export interface Target {
  bucket: string;
  key: string;
}

export function defaultBucket(config: StorageConfig): string {
  const bucket = config.object_store.defaultBucket;
  if (!bucket) throw storageErrors.noDefaultBucket();
  return bucket;
}

export function namedTarget(params: { bucketName: string; '*': string }): Target {
  return { bucket: assertBucketName(params.bucketName), key: assertObjectKey(params['*']) };
}

export function defaultTarget(config: StorageConfig, params: { '*': string }): Target {
  return { bucket: defaultBucket(config), key: assertObjectKey(params['*']) };
}
