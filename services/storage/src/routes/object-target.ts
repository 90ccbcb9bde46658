/**
 * Which bucket and key a request names. The rule, matching Go's ServeMux
 * precedence that the spec's routes come from:
 *   /objects/{bucket}/list         GET lists {bucket}             (literal "list" wins)
 *   /objects/list                  GET lists the default bucket
 *   /objects/{bucket}/{key...}     two or more segments: the first is the bucket
 *   /objects/{key}                 exactly one segment: a key in the default bucket
 * So a default-bucket key reaches "/" through the short route only encoded
 * (`a%2Fb.bin`: one segment; the router decodes it), and an object whose key is exactly "list" at a bucket's top
 * level can be written, read by HEAD and deleted, but GET of it lists the bucket.
 *
 * Names and keys that break the rules of `@gpu/common` (`object-names.ts`) are refused by the routes' parameter
 * schemas (`schemas.ts`), naming the field; what the store can hold of a key (the caller's folder and the configured
 * limit decide) is checked here (`assertStorable`).
 */
import { callerOf } from '@gpu/common';
import type { FastifyRequest } from 'fastify';
import type { StorageConfig } from '../config.ts';
import type { ResolvedTarget } from '../domain/access.ts';
import type { StorageContext } from '../domain/context.ts';
import { storeKeyProblem } from '../domain/key-limits.ts';
import { storageErrors } from '../errors.ts';

export function defaultBucket(config: StorageConfig): string {
  const bucket = config.object_store.default_bucket;
  if (!bucket) throw storageErrors.noDefaultBucket();
  return bucket;
}

/**
 * The target, when the store can hold its key (`domain/key-limits.ts`: the store's key, the caller's folder
 * included); else a 400 naming `field`, before the store is asked anything.
 */
export function assertStorable(
  ctx: StorageContext,
  target: ResolvedTarget,
  field = 'params.objectKey',
): ResolvedTarget {
  const problem = storeKeyProblem(target.key, ctx.config.object_store.max_key_segment_bytes, target.folder);
  if (problem) throw storageErrors.invalidObjectKey(problem, field);
  return target;
}

/** A bucket-named route's target, once the caller may use it. */
export async function namedTargetOf(
  ctx: StorageContext,
  request: FastifyRequest,
  params: { bucketName: string; '*': string },
): Promise<ResolvedTarget> {
  const target = assertStorable(ctx, { bucket: params.bucketName, key: params['*'], folder: '' });
  await ctx.access.assertMayUse(callerOf(request), target.bucket, target.key);
  return target;
}

/** A default-bucket route's target: the key in the caller's folder (as named for admins and services). */
export function defaultTargetOf(ctx: StorageContext, request: FastifyRequest, params: { '*': string }): ResolvedTarget {
  return assertStorable(ctx, ctx.access.defaultTarget(callerOf(request), defaultBucket(ctx.config), params['*']));
}
