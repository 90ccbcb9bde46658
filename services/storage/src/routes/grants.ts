/**
 * POST /grants: presigned URLs to one user's objects for a workload run for them (`domain/grants.ts`), asked for by
 * a platform service (billing) or an admin; no one else may ask. Names and keys are checked here by `@gpu/common`'s
 * rules, each field error naming its entry (`body.read.2.key`).
 */
import { errors, type FieldError, type RoutePlugin } from '@gpu/common';
import { z } from 'zod';
import { GRANT_ROLES } from '../domain/access.ts';
import type { StorageContext } from '../domain/context.ts';
import { expirySeconds, GRANT_EXPIRY } from '../domain/expiry.ts';
import { type GrantEntry, grantUrls } from '../domain/grants.ts';
import { utcSeconds } from './presenters.ts';
import {
  bucketField,
  expiryField,
  keyField,
  problemResponse,
  STORE_KEY_LIMITS,
  schemas,
  storeErrorResponses,
} from './schemas.ts';

/** Entries a grant may name: a session's inputs, and its logs and outputs. */
const MAX_READ = 64;
const MAX_WRITE = 1000;

const entrySchema = z
  .object({
    bucket: bucketField
      .optional()
      .describe("the bucket; without it, the key is in the user's folder of the default bucket (`users/{user_id}/`)"),
    key: keyField.describe(
      "the full key in `bucket`; without `bucket`, relative to the user's folder, as the user's own `/objects/{key}` " +
        `names it; ${STORE_KEY_LIMITS}`,
    ),
  })
  .strict()
  .describe('An object of the user')
  .register(schemas, { id: 'GrantEntry' });

const grantBody = z
  .object({
    user_id: z.uuid().describe('the user the objects are checked for, as that user would be checked'),
    read: z
      .array(entrySchema)
      .max(MAX_READ)
      .default([])
      .describe(`objects to read (presigned GET URLs); each must exist; at most ${MAX_READ}`),
    write: z
      .array(entrySchema)
      .max(MAX_WRITE)
      .default([])
      .describe(`objects to write (presigned PUT URLs); at most ${MAX_WRITE}`),
    expiry: expiryField(GRANT_EXPIRY)
      .optional()
      .describe(
        `how long the URLs are valid, e.g. "30s", "10m", "1h"; default ${GRANT_EXPIRY.fallback}, 1 second to ${GRANT_EXPIRY.maxWords}`,
      ),
  })
  .strict()
  .register(schemas, { id: 'GrantRequest' });

const grantedObject = {
  bucket: z.string(),
  key: z.string().describe('as requested'),
  url: z.string(),
};

const grantResponse = z
  .object({
    read: z
      .array(z.object({ ...grantedObject, size: z.number().int().describe('bytes') }))
      .describe('presigned GET URLs, in request order'),
    write: z.array(z.object(grantedObject)).describe('presigned PUT URLs, in request order'),
    expires_at: z.string().describe('RFC 3339 UTC'),
  })
  .register(schemas, { id: 'GrantResponse' });

/** Bucket-less entries while no default bucket is configured: each one's field. */
function unnamedBuckets(body: { read: GrantEntry[]; write: GrantEntry[] }): FieldError[] {
  const message = 'required: no default bucket is configured (object_store.default_bucket)';
  return (['read', 'write'] as const).flatMap((list) =>
    body[list].flatMap((entry, i) =>
      entry.bucket === undefined ? [{ path: `body.${list}.${i}.bucket`, message }] : [],
    ),
  );
}

export const grantRoutes: RoutePlugin<StorageContext> = async (app, ctx) => {
  const defaultBucket = ctx.config.object_store.default_bucket;
  app.post(
    '/grants',
    {
      // Billing asks on the internal network; no gateway routes `/grants` (tools/gateway's SERVICE_ONLY).
      config: { roles: GRANT_ROLES, openapi: { headers: { 200: ['Cache-Control'] }, internal: true } },
      schema: {
        tags: ['grants'],
        operationId: 'grantObjectUrls',
        summary: "Presigned URLs to a user's objects, for a workload run for them (services and admins)",
        description:
          "Each entry is checked as the user's own request would be (their buckets, their folder of the default " +
          'bucket); every `read` object must exist; nothing is signed unless every entry passes. ' +
          '`Cache-Control: no-store`: whoever holds a URL can use that object until `expires_at`.',
        body: grantBody,
        response: {
          200: grantResponse,
          ...storeErrorResponses,
          403: problemResponse(
            'ROLE_REQUIRED (a caller other than a platform service or an admin); BUCKET_NOT_OWNED, FOLDER_NOT_OWNED ' +
              '(an entry the user may not use; the detail names it)',
          ),
          404: problemResponse(
            'BUCKET_NOT_FOUND, OBJECT_NOT_FOUND (a missing bucket or `read` object; the detail names it)',
          ),
        },
      },
    },
    async (request, reply) => {
      const { body } = request;
      const expiry = expirySeconds(body.expiry, GRANT_EXPIRY);
      const unnamed = defaultBucket ? [] : unnamedBuckets(body);
      if (unnamed.length > 0) {
        throw errors.validation(`no default bucket is configured: every entry must name its bucket`, unnamed);
      }
      const grant = await grantUrls(
        {
          store: ctx.store,
          access: ctx.access,
          defaultBucket,
          maxSegmentBytes: ctx.config.object_store.max_key_segment_bytes,
        },
        // User IDs are lowercase UUIDs: an uppercase one names the same user, and so the same folder.
        { userId: body.user_id.toLowerCase(), read: body.read, write: body.write, expirySeconds: expiry },
      );
      request.log.info(
        { user_id: body.user_id, read: grant.read.length, write: grant.write.length, expiry_s: expiry },
        'grant signed',
      );
      return reply.header('cache-control', 'no-store').send({
        read: grant.read,
        write: grant.write,
        expires_at: utcSeconds(grant.expiresAt),
      });
    },
  );
};
