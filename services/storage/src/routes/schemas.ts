/** Zod schemas shared by the storage routes (and so by the OpenAPI document). */
import { problemSchema } from '@gpu/common';
import { z } from 'zod';

export const objectInfoSchema = z
  .object({
    key: z.string().describe('object key (a common prefix ends with "/")'),
    size: z.number().int().describe('bytes'),
    last_modified: z.string().nullable().describe('RFC 3339 UTC; null for a common prefix'),
    content_type: z.string().nullable().describe('null in listings unless `metadata=true`'),
    etag: z.string().nullable(),
    is_prefix: z.boolean().describe('true for a common prefix of a non-recursive listing'),
  })
  .describe('ObjectInfo');

export const bucketParams = z.object({ bucketName: z.string().describe('bucket name (S3 naming rules)') });
export const bucketKeyParams = z.object({
  bucketName: z.string().describe('bucket name (S3 naming rules)'),
  '*': z.string().describe('object key; may contain slashes'),
});
export const keyParams = z.object({ '*': z.string().describe('object key in the default bucket (one path segment)') });

export const errorResponses = {
  400: problemSchema,
  404: problemSchema,
  503: problemSchema,
};
