/**
 * Copies the object store makes itself, no byte through the service or the client:
 * - POST /objects/copy: an object copied to another key, in its bucket or another (`domain/objects.ts`' copyObject);
 * - POST /uploads/{id}/parts/{n}/copy: one part of a resumable upload copied from a byte range of an object (S3's
 *   UploadPartCopy), so that a client copies an object of any size part by part, each request short, and goes on
 *   after a failure with the parts it has (`gpu storage cp` between two `gpu:` paths, for large objects).
 * The caller must be allowed to read the source and to write the destination, each checked as its own request would
 * be (`domain/access.ts`; an upload's destination was checked when it started); an end without `bucket` is a key of
 * the caller's folder of the default bucket, as the default-bucket routes name it.
 */
import {
  assertScope,
  callerOf,
  durationMs,
  errors,
  type Principal,
  type RoutePlugin,
  sameEntityTag,
  scopeAllows,
} from '@gpu/common';
import type { FastifyRequest } from 'fastify';
import { z } from 'zod';
import { type ResolvedTarget, STORAGE_ROLES } from '../domain/access.ts';
import type { StorageContext } from '../domain/context.ts';
import { copyObject, existingObject } from '../domain/objects.ts';
import { storageErrors } from '../errors.ts';
import { assertStorable, defaultBucket } from './object-target.ts';
import { objectInfo } from './presenters.ts';
import {
  bucketField,
  keyField,
  objectInfoSchema,
  problemResponse,
  STORE_KEY_LIMITS,
  schemas,
  storeErrorResponses,
} from './schemas.ts';
import { partParams, partSchema } from './uploads.ts';

const endSchema = (what: string) =>
  z
    .object({
      bucket: bucketField
        .optional()
        .describe(
          'the bucket; without it, the key is in your folder of the default bucket (`users/{user_id}/`), as `/objects/{key}` names it',
        ),
      key: keyField.describe(`the key in \`bucket\` (without it, relative to your folder); ${STORE_KEY_LIMITS}`),
    })
    .strict()
    .describe(what);

const copyBody = z
  .object({
    source: endSchema('the object copied: one you may read'),
    destination: endSchema('where the copy is stored (an object there is replaced): a key you may write'),
  })
  .strict()
  .register(schemas, { id: 'CopyRequest' });

type End = z.infer<ReturnType<typeof endSchema>>;

/**
 * Copies one owner may have under way at once on one instance (a `gpu storage cp -r` runs 4): each holds a connection
 * to the store until the store is done, so one user's many would keep everyone else's waiting. One more waits for a
 * slot of its owner's to free, up to `COPY_SLOT_WAIT_MS`; then it is 429 RATE_LIMITED, `Retry-After`
 * `COPY_RETRY_SECONDS`.
 */
export const COPIES_AT_ONCE = 4;
const COPY_SLOT_WAIT_MS = 30_000;
const COPY_RETRY_SECONDS = 2;

/** What each owner has under way on this instance, and who waits for one of their slots. */
export class CopySlots {
  private readonly held = new Map<string, number>();
  private readonly waiting = new Map<string, Array<() => void>>();

  constructor(private readonly waitMs = COPY_SLOT_WAIT_MS) {}

  /** A slot of the owner's, once one is free (429 after `waitMs`); the function given back frees it. */
  async take(owner: string): Promise<() => void> {
    const deadline = Date.now() + this.waitMs;
    while ((this.held.get(owner) ?? 0) >= COPIES_AT_ONCE) {
      const left = deadline - Date.now();
      if (left <= 0 || !(await this.freed(owner, left))) throw errors.rateLimited(COPY_RETRY_SECONDS);
    }
    this.held.set(owner, (this.held.get(owner) ?? 0) + 1);
    let given = false;
    return () => {
      if (given) return;
      given = true;
      const left = (this.held.get(owner) ?? 1) - 1;
      if (left === 0) this.held.delete(owner);
      else this.held.set(owner, left);
      const queue = this.waiting.get(owner);
      queue?.shift()?.();
      if (queue?.length === 0) this.waiting.delete(owner);
    };
  }

  /** Resolves true when one of the owner's slots is freed within `ms`, else false. */
  private freed(owner: string, ms: number): Promise<boolean> {
    return new Promise((resolve) => {
      const queue = this.waiting.get(owner) ?? [];
      this.waiting.set(owner, queue);
      const wake = () => {
        clearTimeout(timer);
        resolve(true);
      };
      const timer = setTimeout(() => {
        queue.splice(queue.indexOf(wake), 1);
        if (queue.length === 0) this.waiting.delete(owner);
        resolve(false);
      }, ms);
      queue.push(wake);
    });
  }
}

/** A copy made after its request is given up (at the latest): the transfer time limit, or a day without one. */
const DAY_MS = 24 * 60 * 60 * 1000;

/** The store's object an end names, once the caller may use it; a key the store cannot hold is a 400 naming `field`. */
async function targetOf(ctx: StorageContext, caller: Principal, end: End, field: string): Promise<ResolvedTarget> {
  if (end.bucket === undefined) {
    return assertStorable(ctx, ctx.access.defaultTarget(caller, defaultBucket(ctx.config), end.key), `${field}.key`);
  }
  const target = assertStorable(ctx, { bucket: end.bucket, key: end.key, folder: '' }, `${field}.key`);
  await ctx.access.assertMayUse(caller, target.bucket, target.key);
  return target;
}

/**
 * A copy reads one object and writes another: an API key needs storage:read (or read) besides the route's
 * storage:write. Checked before the body is read, as the route's own scope is: the source is read as a download reads it.
 */
async function mayReadToo(request: FastifyRequest): Promise<void> {
  const caller = callerOf(request);
  if (caller.scopes && !scopeAllows(caller.scopes, 'storage:read', 'GET')) assertScope(caller, 'storage:read');
}

const RANGE = /^bytes=(\d{1,15})-(\d{1,15})$/;

const partCopyBody = z
  .object({
    source: endSchema('the object the part is copied from: one you may read'),
    range: z
      .string()
      .max(40)
      .regex(RANGE, 'must be `bytes=<first>-<last>` (inclusive byte offsets, as HTTP Range)')
      .optional()
      .describe(
        "the source's bytes the part is, as HTTP's Range names them (`bytes=0-104857599`: the first 100 MiB); " +
          'without it, the whole source',
      ),
    source_etag: z
      .string()
      .min(1)
      .max(1024)
      .describe(
        "the source's ETag as read (HEAD it first): the part is copied only from that version (else 409 " +
          'SOURCE_CHANGED). Name the same one in every part of a copy, so that no part is of another version',
      ),
  })
  .strict()
  .register(schemas, { id: 'PartCopyRequest' });

export const objectCopyRoute: RoutePlugin<StorageContext> = async (app, ctx) => {
  const timeoutMs = durationMs(ctx.config.object_store.transfer_timeout);
  const slots = new CopySlots();
  app.post(
    '/objects/copy',
    {
      config: { roles: STORAGE_ROLES, scope: 'storage:write', timeoutMs },
      preValidation: mayReadToo,
      schema: {
        tags: ['objects'],
        operationId: 'copyObject',
        summary: 'Copy an object to another key, in its bucket or another, at the store (no bytes through you)',
        description:
          'The store copies the bytes and the content type of the version of `source` it finds when the copy ' +
          'begins (objects over `object_store.copy_part_size`, 5 GiB by default, in parts). Answers the copy as an ' +
          'upload does; an object at `destination` is replaced. Either end without `bucket` is a key of your folder ' +
          'of the default bucket. Run again, it copies again (the same result). An API key needs `storage:write` ' +
          `and \`storage:read\` (or \`read\`). At most ${COPIES_AT_ONCE} copies of one user are under way at once on ` +
          `an instance: another waits for one to end, ${COPY_SLOT_WAIT_MS / 1000} s at most (then 429). ` +
          'The answer comes once the store has copied: a large copy takes a while, which ' +
          "a gateway's time limit for an answer bounds (5 minutes on the platform's).",
        body: copyBody,
        response: {
          201: objectInfoSchema,
          ...storeErrorResponses,
          403: problemResponse(
            'BUCKET_NOT_OWNED, FOLDER_NOT_OWNED (an end you may not use), ROLE_REQUIRED, or INSUFFICIENT_SCOPE (an API key without storage:write, or without storage:read or read)',
          ),
          429: problemResponse(
            `RATE_LIMITED: ${COPIES_AT_ONCE} copies of yours were under way for ${COPY_SLOT_WAIT_MS / 1000} s; try again after Retry-After`,
          ),
          400: problemResponse(
            'VALIDATION_ERROR: a bad bucket name or key, a key the store cannot hold, or `destination` the same ' +
              'object as `source` (`errors` names the field)',
          ),
          404: problemResponse(
            'OBJECT_NOT_FOUND (no `source`), BUCKET_NOT_FOUND (either bucket), DEFAULT_BUCKET_NOT_CONFIGURED',
          ),
          409: problemResponse('SOURCE_CHANGED: `source` was replaced while it was copied; nothing was copied'),
        },
      },
    },
    async (request, reply) => {
      const caller = callerOf(request);
      const source = await targetOf(ctx, caller, request.body.source, 'body.source');
      const destination = await targetOf(ctx, caller, request.body.destination, 'body.destination');
      const free = await slots.take(ctx.access.ownerOf(caller));
      try {
        const until = new Date(Date.now() + (timeoutMs > 0 ? timeoutMs : DAY_MS));
        const copied = await copyObject(ctx.store, { source, destination, until, signal: request.abortSignal });
        return reply.code(201).send(objectInfo({ ...copied, key: copied.key.slice(destination.folder.length) }));
      } finally {
        free();
      }
    },
  );
  app.post(
    '/uploads/:uploadId/parts/:partNumber/copy',
    {
      config: { roles: STORAGE_ROLES, scope: 'storage:write', timeoutMs },
      preValidation: mayReadToo,
      schema: {
        tags: ['resumable uploads'],
        operationId: 'copyUploadPart',
        summary:
          'Have the store copy one part from a byte range of an object (no bytes through you); a part of the same number is replaced',
        description:
          "The store copies the part (S3's UploadPartCopy) from the version of `source` that `source_etag` names " +
          '(HEAD it first). A large object is copied so part by part into an upload to the destination, each ' +
          'request short (a part is at most 5 GiB; every part but the last at least 5 MiB, checked when the upload ' +
          'completes), and after a failure only the parts missing are copied again. The parts, copied and sent, ' +
          'count toward `max_upload_size` as sent ones do. An API key needs `storage:write` and `storage:read` (or ' +
          `\`read\`); copies of one user share the ${COPIES_AT_ONCE} slots of \`POST /objects/copy\`.`,
        params: partParams,
        body: partCopyBody,
        response: {
          200: partSchema,
          ...storeErrorResponses,
          400: problemResponse(
            'VALIDATION_ERROR: a bad bucket name, key or range (its last byte before its first), or a part over 5 GiB',
          ),
          403: problemResponse(
            'BUCKET_NOT_OWNED, FOLDER_NOT_OWNED (a source you may not read), ROLE_REQUIRED, or INSUFFICIENT_SCOPE',
          ),
          404: problemResponse(
            'UPLOAD_NOT_FOUND (no unfinished upload of yours has this ID), OBJECT_NOT_FOUND (no `source`), ' +
              'BUCKET_NOT_FOUND, DEFAULT_BUCKET_NOT_CONFIGURED',
          ),
          409: problemResponse(
            'SOURCE_CHANGED: `source` is not the version `source_etag` names (or was replaced meanwhile)',
          ),
          413: problemResponse('PAYLOAD_TOO_LARGE: with the other parts, the upload would pass max_upload_size'),
          416: problemResponse('RANGE_NOT_SATISFIABLE: `range` is not within the source'),
          429: problemResponse(
            `RATE_LIMITED: ${COPIES_AT_ONCE} copies of yours were under way for ${COPY_SLOT_WAIT_MS / 1000} s`,
          ),
        },
      },
    },
    async (request, reply) => {
      const caller = callerOf(request);
      const owner = ctx.access.ownerOf(caller);
      const source = await targetOf(ctx, caller, request.body.source, 'body.source');
      const record = await ctx.uploads.get(owner, request.params.uploadId);
      const head = await existingObject(ctx.store, source);
      // That very version, named as the store tags it (with or without its quotes): no `*`, no list.
      if (!head.etag || !sameEntityTag(request.body.source_etag, head.etag)) throw storageErrors.sourceChanged();
      const range = RANGE.exec(request.body.range ?? '');
      const free = await slots.take(owner);
      try {
        const part = await ctx.uploads.copyPart(
          record,
          {
            partNumber: request.params.partNumber,
            source: { bucket: source.bucket, key: source.key, etag: head.etag, size: head.contentLength },
          },
          range ? { first: Number(range[1]), last: Number(range[2]) } : undefined,
          request.abortSignal,
        );
        return reply.send({
          part_number: request.params.partNumber,
          size: part.size,
          etag: part.etag,
          last_modified: new Date().toISOString(),
        });
      } finally {
        free();
      }
    },
  );
};
