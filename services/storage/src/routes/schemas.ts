/** Zod schemas shared by the storage routes (and so by the OpenAPI document). */
import {
  durationWithin,
  type HeaderName,
  problemSchema,
  schemaRegistry,
  zBucketName,
  zDuration,
  zObjectKey,
} from '@gpu/common';
import { z } from 'zod';
import { type ExpiryRule, MIN_EXPIRY } from '../domain/expiry.ts';
import { DEFAULT_MAX_KEY_SEGMENT_BYTES, MAX_STORE_KEY_BYTES } from '../domain/key-limits.ts';

/** The storage document's named schemas (`components.schemas`). */
export const schemas = schemaRegistry();

export const objectInfoSchema = z
  .object({
    key: z.string().describe('object key (a common prefix ends with "/")'),
    size: z.number().int().describe('bytes'),
    last_modified: z.string().nullable().describe('RFC 3339 UTC; null for a common prefix'),
    content_type: z.string().nullable().describe('null for a common prefix, and in listings with `metadata=false`'),
    etag: z.string().nullable(),
    is_prefix: z.boolean().describe('true for a common prefix of a non-recursive listing'),
  })
  .describe('An object, or a common prefix ("folder") of a one-level listing')
  .register(schemas, { id: 'ObjectInfo' });

/** A page of a listing. */
export const objectListSchema = z
  .array(objectInfoSchema)
  .describe('Objects and common prefixes, sorted by key')
  .register(schemas, { id: 'ObjectList' });

/** The name of an object key in the document's paths: `/objects/{bucketName}/{objectKey}`. */
export const OBJECT_KEY = 'objectKey';

/**
 * What the store holds of a key (`domain/key-limits.ts`), as every key's description says it: checked on every route
 * that takes a key, before the store is asked anything (400 naming the field).
 */
export const STORE_KEY_LIMITS =
  `the key the store holds (your folder \`users/{id}/\` in front, on the default-bucket routes) has at most ` +
  `${MAX_STORE_KEY_BYTES} bytes of UTF-8, and each \`/\`-separated segment at most \`object_store.max_key_segment_bytes\` ` +
  `(${DEFAULT_MAX_KEY_SEGMENT_BYTES} by default, the documents' \`x-max-segment-utf8-bytes\`)`;

/** A bucket name in a JSON body, checked by the platform's naming rules (`@gpu/common`'s `zBucketName`). */
export const bucketField = zBucketName();

/**
 * An object key, checked by the platform's key rules (`zObjectKey`: its `pattern` and its 1024 bytes); the store's
 * limit of a segment (`x-max-segment-utf8-bytes`, the setting's default) is checked with the key the store holds
 * (`assertStorable`, `domain/key-limits.ts`), which the caller's folder and the configured limit decide.
 */
export const keyField = zObjectKey().meta({ 'x-max-segment-utf8-bytes': DEFAULT_MAX_KEY_SEGMENT_BYTES });

const bucketNameParam = zBucketName().describe('bucket name (S3 naming rules: 3-63 characters)');

export const bucketParams = z.object({ bucketName: bucketNameParam });
export const bucketKeyParams = z.object({
  bucketName: bucketNameParam,
  '*': keyField.describe(
    'object key; may contain slashes, sent as they are or encoded (`%2F`), as a client library encodes them; ' +
      STORE_KEY_LIMITS,
  ),
});
export const keyParams = z.object({
  '*': keyField.describe(
    'object key in the default bucket: one path segment, or a key with slashes encoded (`a%2Fb.bin` is `a/b.bin`); ' +
      STORE_KEY_LIMITS,
  ),
});

/** A URL's requested lifetime: a duration from 1 second to the rule's bound (`domain/expiry.ts`). */
export const expiryField = (rule: ExpiryRule) =>
  durationWithin(zDuration(), MIN_EXPIRY, rule.max, `must be from 1 second to ${rule.maxWords}`);

/**
 * Raw object bytes, for the OpenAPI document: a binary string. It accepts any value, so that as an upload's body
 * schema it never refuses a request (the body is not parsed: the upload streams it).
 */
export const binarySchema = z.any().meta({ type: 'string', format: 'binary', description: 'raw object bytes' });

/** A response whose body is the object's bytes, with the Content-Type it was stored with. */
export const bytesResponse = (description: string) => ({ description, content: { '*/*': { schema: binarySchema } } });

/**
 * An error response as the error handler sends it: `application/problem+json`. (The handler serializes the body
 * itself, so this schema documents the answer and validates nothing.)
 */
export const problemResponse = (description: string) => ({
  description,
  content: { 'application/problem+json': { schema: problemSchema } },
});

/** Headers of an object's answers (GET, HEAD): what the store holds of it. */
export const OBJECT_HEADERS: readonly HeaderName[] = ['Content-Length', 'ETag', 'Last-Modified', 'Accept-Ranges'];

/** Errors every route can answer. */
export const errorResponses = {
  400: problemResponse(
    'VALIDATION_ERROR: a bad bucket name, key or request value, or a key the store cannot hold (`errors` names the field)',
  ),
  401: problemResponse('no valid access token (MISSING_TOKEN, INVALID_TOKEN); WWW-Authenticate: Bearer'),
  403: problemResponse(
    "BUCKET_NOT_OWNED (someone else's bucket), FOLDER_NOT_OWNED (outside your folder of the default bucket), " +
      'ROLE_REQUIRED (a caller with no business with objects)',
  ),
  404: problemResponse('not found (BUCKET_NOT_FOUND, OBJECT_NOT_FOUND, DEFAULT_BUCKET_NOT_CONFIGURED)'),
  503: problemResponse('DEPENDENCY_UNAVAILABLE (the object store cannot be reached) or REQUEST_TIMEOUT'),
};

/** Errors of the routes that call the object store: those plus 502 when the store refuses the request. */
export const storeErrorResponses = {
  ...errorResponses,
  502: problemResponse('OBJECT_STORE_ERROR: the object store refused the request (e.g. wrong credentials)'),
};
