import { callerOf, type RoutePlugin } from '@gpu/common';
/** POST /buckets/{bucketName}: ensure a bucket exists, creating it when missing. */
import { z } from 'zod';
import { STORAGE_ROLES } from '../domain/access.ts';
import type { StorageContext } from '../domain/context.ts';
import { bucketParams, schemas, storeErrorResponses } from './schemas.ts';

const ensureResponse = z
  .object({
    message: z.string(),
    bucket: z.string(),
    created: z.boolean().describe('false when the bucket already existed'),
  })
  .register(schemas, { id: 'BucketEnsured' });

export const bucketRoutes: RoutePlugin<StorageContext> = async (app, ctx) => {
  app.post(
    '/buckets/:bucketName',
    {
      config: { roles: STORAGE_ROLES, scope: 'storage:write' },
      schema: {
        tags: ['buckets'],
        operationId: 'ensureBucket',
        summary: 'Ensure a bucket exists (created when missing); 201 either way',
        params: bucketParams,
        response: { 201: ensureResponse, ...storeErrorResponses },
      },
    },
    async (request, reply) => {
      const bucket = request.params.bucketName;
      const outcome = await ctx.access.ensureBucket(callerOf(request), bucket);
      request.log.info({ bucket, outcome }, 'bucket ensured');
      return reply.code(201).send({
        message: outcome === 'created' ? 'bucket created' : 'bucket already exists',
        bucket,
        created: outcome === 'created',
      });
    },
  );
};
