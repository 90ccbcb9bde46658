/**
 * Object routes, bucket-named and default-bucket (see object-target.ts for how
 * a path resolves), plus listings. Bodies of these routes are raw bytes: the
 * JSON parser is removed here so a JSON file uploads like any other.
 */
import {
  durationMs,
  type HeaderName,
  ifMatchHeader,
  noBody,
  PAGE_HEADERS,
  type RouteDocs,
  type RoutePlugin,
  zBool,
} from '@gpu/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { ResolvedTarget as Target } from '../domain/access.ts';
import { STORAGE_ROLES } from '../domain/access.ts';
import type { StorageContext } from '../domain/context.ts';
import { REDIRECT_EXPIRY_SECONDS } from '../domain/objects.ts';
import { listBucket, listQuery } from './object-list.ts';
import { defaultTargetOf, namedTargetOf } from './object-target.ts';
import { deleteObject, downloadObject, headObject, uploadObject } from './object-transfer.ts';
import {
  binarySchema,
  bucketKeyParams,
  bucketParams,
  bytesResponse,
  keyParams,
  OBJECT_HEADERS,
  OBJECT_KEY,
  objectInfoSchema,
  objectListSchema,
  problemResponse,
  storeErrorResponses,
} from './schemas.ts';

const LIST_PAGING =
  'Entries are sorted by key (UTF-8 bytes), `limit` per page (default 100). When more entries follow, the response ' +
  'carries `X-Next-Cursor` (pass it as `cursor`) and `Link: <...>; rel="next"`, and, for earlier clients, ' +
  '`X-Next-Start-After` (the last key, for the deprecated `start_after`, when it is printable ASCII). In a ' +
  'one-level listing, a page that ended ' +
  'on a folder continues after the whole folder.';

type Handler = (ctx: StorageContext, target: Target, request: FastifyRequest, reply: FastifyReply) => Promise<unknown>;

/**
 * An answer with headers only (HEAD, 304, 204). `type: 'null'` in the JSON schema is what tells @fastify/swagger
 * to describe no content (zod writes a null schema for OpenAPI 3.0 as a nullable string).
 */

const REDIRECT_MINUTES = REDIRECT_EXPIRY_SECONDS / 60;

const downloadQuery = z.object({
  redirect: zBool()
    .default(false)
    .describe(
      'true: answer 307 to a presigned GET URL of the object at the object store instead of relaying the bytes ' +
        `(the same access checks; the URL is valid ${REDIRECT_MINUTES} minutes), for clients that can follow a redirect`,
    ),
});

/** A listing's page headers: the platform's, and the deprecated `X-Next-Start-After`. */
const LIST_DOCS: RouteDocs = { headers: { 200: [...PAGE_HEADERS, 'X-Next-Start-After'] } };

/** The headers of an object's bytes or headers (GET 200/206, HEAD 200) and of a 304. */
const BYTES_HEADERS: readonly HeaderName[] = ['Content-Type', ...OBJECT_HEADERS];
const NOT_MODIFIED_HEADERS: readonly HeaderName[] = ['ETag', 'Last-Modified'];

const deleteHeaders = z.object({
  'if-match': ifMatchHeader(
    "the object's ETag as read (or `*`): delete it only if it is still that object (a `gpu storage mv` deletes " +
      'each source so, once copied)',
  ),
});

const operations: Array<{
  method: 'PUT' | 'GET' | 'HEAD' | 'DELETE';
  /** The operationId's verb and noun; the default-bucket twin inserts `DefaultBucket` before the noun. */
  id: [verb: string, noun: string];
  summary: string;
  /** Response headers by status (docs only: the handlers set them). */
  headers?: RouteDocs['headers'];
  handler: Handler;
  transfer: boolean;
  /** Extra schema parts: the upload's body, as the OpenAPI document describes it; the download's query; headers. */
  schema?: { body: z.ZodType; consumes: string[] } | { querystring: z.ZodType } | { headers: z.ZodType };
  response: Record<number, unknown>;
}> = [
  {
    method: 'PUT',
    id: ['upload', 'Object'],
    summary:
      'Upload an object (streamed; multipart for large bodies; 413 over the size limit; stored only when the whole body arrived)',
    handler: uploadObject,
    transfer: true,
    // Any content type: the bytes are stored as sent, with the Content-Type header (or a guess from the key).
    schema: { body: binarySchema, consumes: ['*/*'] },
    response: {
      201: objectInfoSchema,
      ...storeErrorResponses,
      400: problemResponse(
        'VALIDATION_ERROR (bad bucket name or key) or INCOMPLETE_BODY: the body ended (the client half-closed) before ' +
          'its Content-Length or its last chunk, or ran past its Content-Length; nothing was stored',
      ),
      408: problemResponse(
        'CLIENT_TIMEOUT: no byte of the body arrived for object_store.upload_idle_timeout; nothing was stored',
      ),
      413: problemResponse('PAYLOAD_TOO_LARGE: the upload is over max_upload_size'),
    },
  },
  {
    method: 'GET',
    id: ['download', 'Object'],
    headers: {
      200: BYTES_HEADERS,
      206: [...BYTES_HEADERS, 'Content-Range'],
      304: NOT_MODIFIED_HEADERS,
      307: ['Location', 'Cache-Control'],
    },
    summary:
      'Download an object (supports Range, If-None-Match, If-Modified-Since), or with redirect=true be sent to the store',
    handler: downloadObject,
    transfer: true,
    schema: { querystring: downloadQuery },
    response: {
      200: bytesResponse("the object's bytes, with its Content-Type"),
      307: noBody(
        `redirect=true: \`Location\` is a presigned GET URL of the object at the object store, valid ${REDIRECT_MINUTES} minutes ` +
          '(`Cache-Control: no-store`); follow it for the bytes (Range and conditions apply there as here)',
      ),
      206: bytesResponse('the requested byte range, with Content-Range'),
      304: noBody('not modified (If-None-Match / If-Modified-Since); ETag and Last-Modified only'),
      416: problemResponse('RANGE_NOT_SATISFIABLE: the range lies outside the object'),
      ...storeErrorResponses,
    },
  },
  {
    method: 'HEAD',
    id: ['head', 'Object'],
    headers: { 200: BYTES_HEADERS, 304: NOT_MODIFIED_HEADERS },
    summary: "An object's headers: Content-Type, Content-Length, ETag, Last-Modified (no body, errors included)",
    handler: headObject,
    transfer: false,
    response: {
      200: noBody('the headers of a GET'),
      304: noBody('not modified, as GET'),
      400: noBody('bad bucket name or key'),
      401: noBody('no valid access token'),
      403: noBody("someone else's bucket or folder"),
      404: noBody('missing bucket or object'),
      502: noBody('the object store refused the request'),
      503: noBody('the object store cannot be reached, or the request timed out'),
    },
  },
  {
    method: 'DELETE',
    id: ['delete', 'Object'],
    summary: 'Delete an object (with If-Match, only while it is the object of that ETag)',
    handler: deleteObject,
    transfer: false,
    schema: { headers: deleteHeaders },
    response: {
      204: noBody('deleted'),
      ...storeErrorResponses,
      412: problemResponse(
        'OBJECT_CHANGED: If-Match named an ETag the object no longer has (it was replaced since it was read); ' +
          'nothing was deleted',
      ),
    },
  },
];

export const objectRoutes: RoutePlugin<StorageContext> = async (app, ctx) => {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_request, _payload, done) => done(null));
  const transferTimeoutMs = durationMs(ctx.config.object_store.transfer_timeout);

  app.get(
    '/objects/:bucketName/list',
    {
      exposeHeadRoute: false,
      config: { roles: STORAGE_ROLES, scope: 'storage:read', openapi: LIST_DOCS },
      schema: {
        tags: ['objects'],
        operationId: 'listObjects',
        summary: 'List the objects of a bucket',
        description: LIST_PAGING,
        params: bucketParams,
        querystring: listQuery,
        response: { 200: objectListSchema, ...storeErrorResponses },
      },
    },
    async (request, reply) => listBucket(ctx, { bucket: request.params.bucketName }, request.query, request, reply),
  );
  app.get(
    '/objects/list',
    {
      exposeHeadRoute: false,
      config: { roles: STORAGE_ROLES, scope: 'storage:read', openapi: LIST_DOCS },
      schema: {
        tags: ['objects (default bucket)'],
        operationId: 'listDefaultBucketObjects',
        summary: 'List the objects of the default bucket',
        description: LIST_PAGING,
        querystring: listQuery,
        response: { 200: objectListSchema, ...storeErrorResponses },
      },
    },
    async (request, reply) => listBucket(ctx, { defaultBucket: true }, request.query, request, reply),
  );

  for (const op of operations) {
    // HEAD routes are declared here rather than made by Fastify from GET; @fastify/swagger leaves HEAD routes out
    // of the OpenAPI document unless asked.
    const config = {
      roles: STORAGE_ROLES,
      // An API key reads with storage:read (or read), writes and deletes with storage:write.
      scope: op.method === 'PUT' || op.method === 'DELETE' ? ('storage:write' as const) : ('storage:read' as const),
      openapi: { wildcard: OBJECT_KEY, headers: op.headers },
      ...(op.transfer ? { timeoutMs: transferTimeoutMs } : {}),
      ...(op.method === 'HEAD' ? { swagger: { exposeHeadRoute: true } } : {}),
    };
    app.route({
      method: op.method,
      url: '/objects/:bucketName/*',
      exposeHeadRoute: false,
      config,
      schema: {
        tags: ['objects'],
        operationId: `${op.id[0]}${op.id[1]}`,
        summary: op.summary,
        params: bucketKeyParams,
        ...op.schema,
        response: op.response,
      },
      handler: async (request, reply) =>
        op.handler(ctx, await namedTargetOf(ctx, request, request.params), request, reply),
    });
    app.route({
      method: op.method,
      url: '/objects/*',
      exposeHeadRoute: false,
      config,
      schema: {
        tags: ['objects (default bucket)'],
        operationId: `${op.id[0]}DefaultBucket${op.id[1]}`,
        summary: op.summary,
        params: keyParams,
        ...op.schema,
        response: op.response,
      },
      handler: (request, reply) => op.handler(ctx, defaultTargetOf(ctx, request, request.params), request, reply),
    });
  }
};
