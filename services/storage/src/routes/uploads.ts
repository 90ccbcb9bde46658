/**
 * Resumable uploads (`domain/uploads/resumable.ts`): start one for a key, send its parts (raw bytes, any order, again after a
 * failure), read which parts arrived, complete it into the object or abort it. The same access as `PUT /objects`:
 * the key must be one the caller may write when the upload starts; every later step is for the upload's owner only.
 */
import {
  afterCursor,
  callerOf,
  durationMs,
  keysetPage,
  noBody,
  PAGE_HEADERS,
  pageQuery,
  queryInteger,
  type RoutePlugin,
  setNextPage,
} from '@gpu/common';
import type { FastifyRequest } from 'fastify';
import { z } from 'zod';
import { STORAGE_ROLES } from '../domain/access.ts';
import { CONTENT_TYPE_PATTERN, MAX_CONTENT_TYPE_LENGTH, resolveContentType } from '../domain/content-type.ts';
import type { StorageContext } from '../domain/context.ts';
import { headObject } from '../domain/objects.ts';
import type { PartInfo } from '../domain/store.ts';
import { MAX_OPEN_UPLOADS, MAX_PARTS, MIN_PART_SIZE, type UploadRecord } from '../domain/uploads/resumable.ts';
import { storageErrors } from '../errors.ts';
import { assertStorable, defaultBucket } from './object-target.ts';
import { objectInfo, utcSeconds } from './presenters.ts';
import {
  binarySchema,
  bucketField,
  keyField,
  objectInfoSchema,
  problemResponse,
  STORE_KEY_LIMITS,
  schemas,
  storeErrorResponses,
} from './schemas.ts';
import { storeBody } from './upload-body.ts';

const startBody = z
  .object({
    bucket: bucketField
      .optional()
      .describe('a bucket of yours; without it, the key is in your folder of the default bucket, as `/objects/{key}`'),
    key: keyField.describe(`the object to make, as \`PUT /objects\` names it; ${STORE_KEY_LIMITS}`),
    content_type: z
      .string()
      .max(MAX_CONTENT_TYPE_LENGTH)
      .regex(CONTENT_TYPE_PATTERN, 'must be printable ASCII (a media type such as text/csv)')
      .optional()
      .describe("the object's content type; by default a guess from the key's extension"),
  })
  .strict()
  .register(schemas, { id: 'UploadStart' });

export const partSchema = z
  .object({
    part_number: z.number().int(),
    size: z.number().int().describe('bytes'),
    etag: z.string().describe("the store's ETag of the part, as completing with a list of parts names it"),
    last_modified: z.string().nullable().describe('RFC 3339 UTC'),
  })
  .register(schemas, { id: 'UploadPart' });

const uploadFields = {
  upload_id: z.uuid(),
  bucket: z.string().nullable().describe('null: your folder of the default bucket'),
  key: z.string().describe('as you named it'),
  content_type: z.string(),
  created_at: z.string().describe('RFC 3339 UTC'),
  expires_at: z.string().describe('RFC 3339 UTC: when the sweeper aborts the upload if it is not complete'),
};

const uploadSummarySchema = z
  .object(uploadFields)
  .describe('An unfinished upload')
  .register(schemas, { id: 'UploadSummary' });

const uploadListSchema = z
  .array(uploadSummarySchema)
  .describe('Your unfinished uploads, oldest first')
  .register(schemas, { id: 'UploadList' });

const uploadSchema = z
  .object({
    ...uploadFields,
    parts: z.array(partSchema).describe('the parts stored so far, by number'),
    min_part_size: z.number().int().describe('bytes every part but the last must have at least'),
    max_parts: z.number().int(),
    max_size: z.number().int().describe('bytes all parts together may have at most'),
  })
  .describe('An unfinished upload and the parts it holds')
  .register(schemas, { id: 'Upload' });

const completeBody = z
  .object({
    parts: z
      .array(
        z
          .object({
            part_number: z.number().int().min(1).max(MAX_PARTS),
            etag: z.string().min(1).max(200).describe('the ETag the part was answered with'),
          })
          .strict(),
      )
      .min(1)
      .max(MAX_PARTS)
      .optional()
      .describe(
        'the parts to join, ascending by number, each with the ETag it was answered with (409 PARTS_CHANGED when one ' +
          'differs); without it, every part stored, by number. Parts left out are discarded.',
      ),
  })
  .strict()
  .register(schemas, { id: 'UploadComplete' });

const uploadParams = z.object({ uploadId: z.uuid().describe('as `POST /uploads` answered it') });
export const partParams = uploadParams.extend({
  // Digits only: `0x1`, `1e0` and ` 1` are a 400, not part 1.
  partNumber: queryInteger(1, MAX_PARTS).describe(`1 to ${MAX_PARTS}`),
});

const uploadNotFound = problemResponse(
  'UPLOAD_NOT_FOUND: no unfinished upload of yours has this ID (never made, completed, aborted, expired, or ' +
    "someone else's)",
);

function partOf(p: PartInfo) {
  return {
    part_number: p.partNumber,
    size: p.size,
    etag: p.etag,
    last_modified: p.lastModified?.toISOString() ?? null,
  };
}

export const uploadRoutes: RoutePlugin<StorageContext> = async (app, ctx) => {
  const { uploads } = ctx;
  const settings = ctx.config.object_store;
  const ownerOf = (request: FastifyRequest) => ctx.access.ownerOf(callerOf(request));
  const summary = (record: UploadRecord) => ({
    upload_id: record.upload_id,
    bucket: record.named_bucket ? record.bucket : null,
    key: record.key.slice(record.folder.length),
    content_type: record.content_type,
    created_at: record.created_at,
    expires_at: utcSeconds(uploads.expiresAt(record)),
  });
  const withParts = (record: UploadRecord, parts: PartInfo[]) => ({
    ...summary(record),
    parts: parts.map(partOf),
    min_part_size: MIN_PART_SIZE,
    max_parts: MAX_PARTS,
    max_size: settings.max_upload_size,
  });

  app.post(
    '/uploads',
    {
      config: { roles: STORAGE_ROLES, scope: 'storage:write' },
      schema: {
        tags: ['resumable uploads'],
        operationId: 'startUpload',
        summary: 'Start a resumable upload of an object, sent as parts',
        description:
          `The key must be one you may write (as \`PUT /objects\`). At most ${MAX_OPEN_UPLOADS} unfinished uploads ` +
          'each; an upload not completed within `upload_expiry` (24 h by default) is aborted and its parts freed.',
        body: startBody,
        response: {
          201: uploadSchema,
          ...storeErrorResponses,
          409: problemResponse(`TOO_MANY_UPLOADS: you have ${MAX_OPEN_UPLOADS} unfinished uploads`),
        },
      },
    },
    async (request, reply) => {
      const caller = callerOf(request);
      const { bucket, key } = request.body;
      const target = assertStorable(
        ctx,
        bucket ? { bucket, key, folder: '' } : ctx.access.defaultTarget(caller, defaultBucket(ctx.config), key),
        'body.key',
      );
      await ctx.access.assertMayUse(caller, target.bucket, target.key);
      const contentType = resolveContentType(request.body.content_type, key);
      const record = await uploads.create(ownerOf(request), target, bucket !== undefined, contentType);
      request.log.info({ upload_id: record.upload_id, bucket: target.bucket }, 'upload started');
      return reply.code(201).send(withParts(record, []));
    },
  );

  app.get(
    '/uploads',
    {
      config: { roles: STORAGE_ROLES, scope: 'storage:read', openapi: { headers: { 200: PAGE_HEADERS } } },
      schema: {
        tags: ['resumable uploads'],
        operationId: 'listUploads',
        summary: 'Your unfinished uploads, oldest first',
        querystring: z.object(pageQuery),
        response: { 200: uploadListSchema, ...storeErrorResponses },
      },
    },
    async (request, reply) => {
      const after = afterCursor(request.query.cursor);
      const rows = (await uploads.list(ownerOf(request)))
        .map((r) => ({ ...r, id: r.upload_id, cursor_at: r.created_at }))
        .filter((r) => !after || r.cursor_at > after.at || (r.cursor_at === after.at && r.id > after.id));
      const page = keysetPage(rows.slice(0, request.query.limit + 1), request.query.limit);
      setNextPage(request, reply, page.nextCursor);
      return page.items.map(summary);
    },
  );

  app.get(
    '/uploads/:uploadId',
    {
      config: { roles: STORAGE_ROLES, scope: 'storage:read' },
      schema: {
        tags: ['resumable uploads'],
        operationId: 'getUpload',
        summary: 'An unfinished upload and the parts stored so far (what a resuming client need not send again)',
        params: uploadParams,
        response: { 200: uploadSchema, ...storeErrorResponses, 404: uploadNotFound },
      },
    },
    async (request) => {
      const record = await uploads.get(ownerOf(request), request.params.uploadId);
      return withParts(record, await uploads.parts(record));
    },
  );

  app.post(
    '/uploads/:uploadId/complete',
    {
      config: { roles: STORAGE_ROLES, scope: 'storage:write' },
      schema: {
        tags: ['resumable uploads'],
        operationId: 'completeUpload',
        summary: 'Join the parts into the object (it replaces an object of that key); the upload is then gone',
        params: uploadParams,
        body: completeBody,
        response: {
          201: objectInfoSchema,
          ...storeErrorResponses,
          400: problemResponse(
            `NO_PARTS (nothing to join), PART_TOO_SMALL (a part but the last under ${MIN_PART_SIZE} bytes), ` +
              'VALIDATION_ERROR',
          ),
          404: uploadNotFound,
          409: problemResponse(
            'PARTS_CHANGED: a part named was never stored or has another ETag now (sent again meanwhile)',
          ),
          413: problemResponse('PAYLOAD_TOO_LARGE: the parts together are over max_upload_size'),
        },
      },
    },
    async (request, reply) => {
      const record = await uploads.get(ownerOf(request), request.params.uploadId);
      const chosen = request.body.parts?.map((p) => ({ partNumber: p.part_number, etag: p.etag }));
      await uploads.complete(record, chosen);
      const head = await headObject(ctx.store, record, {});
      request.log.info({ upload_id: record.upload_id, size: head.contentLength }, 'upload completed');
      return reply.code(201).send(
        objectInfo({
          key: record.key.slice(record.folder.length),
          size: head.contentLength,
          lastModified: head.lastModified,
          contentType: head.contentType,
          etag: head.etag,
          isPrefix: false,
        }),
      );
    },
  );

  app.delete(
    '/uploads/:uploadId',
    {
      config: { roles: STORAGE_ROLES, scope: 'storage:write' },
      schema: {
        tags: ['resumable uploads'],
        operationId: 'abortUpload',
        summary: 'Give an upload up: its parts are freed',
        params: uploadParams,
        response: { 204: noBody('aborted'), ...storeErrorResponses, 404: uploadNotFound },
      },
    },
    async (request, reply) => {
      await uploads.abort(await uploads.get(ownerOf(request), request.params.uploadId));
      return reply.code(204).send(null);
    },
  );
};

/** PUT of a part: its own plugin, whose body is raw bytes streamed to the store (no parser: a JSON part is bytes). */
export const uploadPartRoute: RoutePlugin<StorageContext> = async (app, ctx) => {
  const { uploads } = ctx;
  const settings = ctx.config.object_store;
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_request, _payload, done) => done(null));
  app.put(
    '/uploads/:uploadId/parts/:partNumber',
    {
      config: {
        roles: STORAGE_ROLES,
        scope: 'storage:write',
        timeoutMs: durationMs(settings.transfer_timeout),
      },
      schema: {
        tags: ['resumable uploads'],
        operationId: 'uploadPart',
        summary:
          'Send one part (raw bytes with a Content-Length; streamed); a part of the same number sent before is replaced',
        params: partParams,
        body: binarySchema,
        consumes: ['*/*'],
        response: {
          200: partSchema,
          ...storeErrorResponses,
          400: problemResponse(
            'LENGTH_REQUIRED (no Content-Length), INCOMPLETE_BODY (the body ended before its Content-Length: the ' +
              'part was not stored), VALIDATION_ERROR',
          ),
          404: uploadNotFound,
          408: problemResponse('CLIENT_TIMEOUT: no byte of the body arrived for object_store.upload_idle_timeout'),
          413: problemResponse(
            'PAYLOAD_TOO_LARGE: with the other parts, the upload would pass max_upload_size; nothing was read',
          ),
        },
      },
    },
    async (request, reply) => {
      const declared = request.headers['content-length'];
      if (declared === undefined) throw storageErrors.lengthRequired();
      const record = await uploads.get(ctx.access.ownerOf(callerOf(request)), request.params.uploadId);
      const partNumber = request.params.partNumber;
      const room = await uploads.roomFor(record, partNumber);
      return storeBody(
        ctx,
        request,
        reply,
        async (body) => {
          const etag = await uploads.putPart(record, {
            partNumber,
            body,
            length: Number(declared),
            signal: request.abortSignal,
          });
          return reply.send({
            part_number: partNumber,
            size: Number(declared),
            etag,
            last_modified: new Date().toISOString(),
          });
        },
        room,
      );
    },
  );
};
