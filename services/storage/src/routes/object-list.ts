/** Listing a bucket: prefix, recursive (default true), paging, optional per-object content types. */
import { zBool } from '@gpu/common';
import type { FastifyReply } from 'fastify';
import { z } from 'zod';
import type { ObjectInfo } from '../adapters/object-store.ts';
import type { StorageDeps } from '../app.ts';
import { assertBucketName, assertPrefix } from '../domain/names.ts';

export const listQuery = z.object({
  prefix: z.string().default('').describe('only keys that start with this'),
  recursive: zBool().default(true).describe('false lists one level: common prefixes come back as entries'),
  limit: z.coerce.number().int().min(1).max(100_000).optional().describe('at most this many entries'),
  start_after: z
    .string()
    .optional()
    .describe(
      'list entries after this key (paging: pass the X-Next-Start-After header of the previous page); ' +
        'in a one-level listing, a folder or a key inside one continues after the whole folder',
    ),
  metadata: zBool().default(false).describe('also fetch each object content type (one HEAD per object; slower)'),
});

const HEAD_CONCURRENCY = 16;

async function withContentTypes(deps: StorageDeps, bucket: string, entries: ObjectInfo[]): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < entries.length) {
      const entry = entries[next++]!;
      if (entry.is_prefix) continue;
      entry.content_type = (await deps.store.head(bucket, entry.key, {})).contentType;
    }
  };
  await Promise.all(Array.from({ length: Math.min(HEAD_CONCURRENCY, entries.length) }, worker));
}

export async function listObjects(
  deps: StorageDeps,
  bucketName: string,
  query: z.infer<typeof listQuery>,
  reply: FastifyReply,
) {
  const bucket = assertBucketName(bucketName);
  const { entries, truncated } = await deps.store.list({
    bucket,
    prefix: assertPrefix(query.prefix),
    recursive: query.recursive,
    limit: query.limit,
    startAfter: query.start_after,
  });
  if (query.metadata) await withContentTypes(deps, bucket, entries);
  // The last entry's key, a folder's included: the store starts the next page after the whole folder.
  if (truncated && entries.length > 0) reply.header('x-next-start-after', entries[entries.length - 1]!.key);
  return reply.send(entries);
}
