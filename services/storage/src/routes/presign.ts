/** Presigned GET/PUT URLs against the object store, bucket-named and default-bucket. */
import { assertScope, callerOf, isPrivileged, type Principal, type RoutePlugin } from '@gpu/common';
import { z } from 'zod';
import { STORAGE_ROLES, type ResolvedTarget as Target } from '../domain/access.ts';
import type { StorageContext } from '../domain/context.ts';
import { expirySeconds, PRESIGN_EXPIRY } from '../domain/expiry.ts';
import { defaultTargetOf, namedTargetOf } from './object-target.ts';
import { utcSeconds } from './presenters.ts';
import {
  bucketKeyParams,
  errorResponses,
  expiryField,
  keyParams,
  OBJECT_KEY,
  problemResponse,
  schemas,
} from './schemas.ts';

const presignBody = z
  .object({
    method: z.enum(['GET', 'PUT']).describe('GET to download, PUT to upload'),
    expiry: expiryField(PRESIGN_EXPIRY)
      .optional()
      .describe(
        `how long the URL is valid, e.g. "30s", "15m", "1h30m"; default ${PRESIGN_EXPIRY.fallback}, at most ${PRESIGN_EXPIRY.maxWords}`,
      ),
  })
  .register(schemas, { id: 'PresignRequest' });

const presignResponse = z
  .object({
    url: z.string(),
    method: z.enum(['GET', 'PUT']),
    key: z.string(),
    bucket: z.string(),
    expires_at: z.string().describe('RFC 3339 UTC'),
  })
  .register(schemas, { id: 'PresignedUrl' });

const PRESIGN_DOCS =
  'A user has write (PUT) URLs open for at most `object_store.max_open_write_urls` keys (10,000 by default): ' +
  "another key's is 409 TOO_MANY_WRITE_URLS until some expire; a URL of a key they hold one of is always given.";

async function presign(ctx: StorageContext, caller: Principal, target: Target, body: z.infer<typeof presignBody>) {
  // A URL to read needs storage:read, one to write storage:write (the route takes a key with either).
  assertScope(caller, body.method === 'PUT' ? 'storage:write' : 'storage:read');
  const seconds = expirySeconds(body.expiry, PRESIGN_EXPIRY);
  // A user's write URLs are counted against their bound; an admin's or a platform service's are not.
  const owner =
    body.method === 'PUT' && !isPrivileged(caller)
      ? { id: ctx.access.ownerOf(caller), max: ctx.config.object_store.max_open_write_urls }
      : undefined;
  const url = await ctx.store.presign(target.bucket, target.key, body.method, seconds, owner);
  return {
    url,
    method: body.method,
    key: target.key.slice(target.folder.length),
    bucket: target.bucket,
    expires_at: utcSeconds(new Date(Date.now() + seconds * 1000)),
  };
}

export const presignRoutes: RoutePlugin<StorageContext> = async (app, ctx) => {
  const response = {
    200: presignResponse,
    ...errorResponses,
    409: problemResponse(
      'TOO_MANY_WRITE_URLS: write URLs open for `object_store.max_open_write_urls` other keys of yours already',
    ),
  };
  app.post(
    '/presigned-url/:bucketName/*',
    {
      config: { roles: STORAGE_ROLES, scope: ['storage:read', 'storage:write'], openapi: { wildcard: OBJECT_KEY } },
      schema: {
        tags: ['presigned URLs'],
        operationId: 'presignObjectUrl',
        summary: 'A time-limited URL for a direct GET or PUT against the object store',
        description: PRESIGN_DOCS,
        params: bucketKeyParams,
        body: presignBody,
        response,
      },
    },
    async (request) => presign(ctx, callerOf(request), await namedTargetOf(ctx, request, request.params), request.body),
  );
  app.post(
    '/presigned-url/*',
    {
      config: { roles: STORAGE_ROLES, scope: ['storage:read', 'storage:write'], openapi: { wildcard: OBJECT_KEY } },
      schema: {
        tags: ['presigned URLs (default bucket)'],
        operationId: 'presignDefaultBucketObjectUrl',
        summary: 'A presigned URL for an object of the default bucket',
        description: PRESIGN_DOCS,
        params: keyParams,
        body: presignBody,
        response,
      },
    },
    async (request) => presign(ctx, callerOf(request), defaultTargetOf(ctx, request, request.params), request.body),
  );
};
