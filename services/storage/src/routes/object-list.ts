/**
 * Listing a bucket: prefix, recursive (default true), paging, per-object
 * content types (unless `metadata=false`). Paging follows the platform's contract (`limit`,
 * `cursor`; `X-Next-Cursor` and `Link: rel="next"` while more entries follow),
 * with the earlier `start_after` / `X-Next-Start-After` kept as deprecated
 * aliases: the cursor encodes the same start-after key.
 */
import {
  callerOf,
  invalidCursor,
  maxUtf8Bytes,
  PREFIX_PATTERN,
  pageQuery,
  prefixProblem,
  setNextPage,
  zBool,
} from '@gpu/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { StorageContext } from '../domain/context.ts';
import { cursorPosition, listingCursor, listObjects } from '../domain/listing.ts';
import { defaultBucket } from './object-target.ts';
import { objectInfo } from './presenters.ts';

const NEXT_START_AFTER_HEADER = 'x-next-start-after';
/** A key a header can carry as it is: printable ASCII. */
const HEADER_SAFE = /^[\x20-\x7e]*$/;

export const listQuery = z.object({
  prefix: maxUtf8Bytes(
    z
      .string()
      .max(1024)
      .regex(PREFIX_PATTERN, { error: (issue) => `invalid object key: ${prefixProblem(String(issue.input))}` }),
    1024,
  )
    .default('')
    .describe('only keys that start with this (empty, or what a key may be)'),
  recursive: zBool().default(true).describe('false lists one level: common prefixes come back as entries'),
  ...pageQuery,
  start_after: z
    .string()
    .max(1024)
    .optional()
    .describe(
      'deprecated, use cursor: list entries after this key (the X-Next-Start-After header of the previous ' +
        'page); in a one-level listing, a folder or a key inside one continues after the whole folder; ' +
        'ignored when cursor is given',
    ),
  metadata: zBool()
    .default(true)
    .describe(
      "fill each object's content_type (from the service's object catalog; the store's listing lacks it); " +
        'false leaves content_type null',
    ),
});

/** Where the page starts: the cursor's key, else `start_after`. */
function startOf(query: z.infer<typeof listQuery>): string | undefined {
  if (query.cursor === undefined) return query.start_after;
  const key = cursorPosition(query.cursor);
  if (key === undefined) throw invalidCursor();
  return key;
}

/**
 * Lists a named bucket (full keys; the caller must own the bucket, or, in the default bucket, list inside its
 * folder) or the default bucket's route (keys relative to the caller's folder there).
 */
export async function listBucket(
  ctx: StorageContext,
  which: { bucket: string } | { defaultBucket: true },
  query: z.infer<typeof listQuery>,
  request: FastifyRequest,
  reply: FastifyReply,
) {
  const actor = callerOf(request);
  const prefix = query.prefix;
  let bucket: string;
  let folder = '';
  if ('bucket' in which) {
    bucket = which.bucket;
    await ctx.access.assertMayUse(actor, bucket, prefix);
  } else {
    ({ bucket, folder } = ctx.access.defaultTarget(actor, defaultBucket(ctx.config), ''));
  }
  // A cursor holds a full key; `start_after` is a key as the caller sees them.
  const start =
    query.cursor === undefined && query.start_after !== undefined ? folder + query.start_after : startOf(query);
  const listing = await listObjects(ctx, {
    bucket,
    prefix: folder + prefix,
    recursive: query.recursive,
    limit: query.limit,
    startAfter: start,
    metadata: query.metadata,
  });
  if (listing.next !== undefined) {
    setNextPage(request, reply, listingCursor(listing.next));
    // A header carries printable ASCII only (Node refuses more: a 500; Latin-1 arrives garbled): a page ending on
    // any other key names its next page by the cursor alone.
    const last = listing.next.slice(folder.length);
    if (HEADER_SAFE.test(last)) reply.header(NEXT_START_AFTER_HEADER, last);
  }
  return reply.send(listing.entries.map((e) => objectInfo({ ...e, key: e.key.slice(folder.length) })));
}
