/**
 * The storage service's named errors: kinds, never HTTP statuses. The ones naming a request field
 * (`params.bucketName`, `params.objectKey`) are thrown by the routes.
 */
import { AppError, errors } from '@gpu/common';

export const storageErrors = {
  bucketNotFound: (bucket: string) => errors.notFound('BUCKET_NOT_FOUND', `bucket ${bucket} not found`),
  objectNotFound: (bucket: string, key: string) =>
    errors.notFound('OBJECT_NOT_FOUND', `object ${key} not found in bucket ${bucket}`),
  invalidBucketName: (bucket: string, why: string) =>
    errors.validation(`invalid bucket name ${JSON.stringify(bucket)}: ${why}`, [
      { path: 'params.bucketName', message: why },
    ]),
  invalidObjectKey: (why: string, path = 'params.objectKey') =>
    errors.validation(`invalid object key: ${why}`, [{ path, message: why }]),
  noDefaultBucket: () =>
    errors.notFound('DEFAULT_BUCKET_NOT_CONFIGURED', 'no default bucket is configured (object_store.default_bucket)'),
  // The rest of such a body is not read: the connection is closed after the answer.
  incompleteBody: (detail: string) =>
    errors.badRequest('INCOMPLETE_BODY', detail, { headers: { connection: 'close' } }),
  uploadStalled: (idleMs: number) =>
    new AppError(
      'client_timeout',
      'CLIENT_TIMEOUT',
      `no byte of the upload body arrived for ${idleMs} ms (object_store.upload_idle_timeout); nothing was stored`,
      { headers: { connection: 'close' } },
    ),
  uploadTooLarge: (limit: number) => errors.payloadTooLarge(`upload exceeds the limit of ${limit} bytes`),
  rangeNotSatisfiable: (detail: string) => new AppError('range_not_satisfiable', 'RANGE_NOT_SATISFIABLE', detail),
  preconditionFailed: (detail: string) => new AppError('precondition_failed', 'PRECONDITION_FAILED', detail),
  // Its ETag now is not told: a caller that may delete an object need not be one that may read it.
  objectChanged: () =>
    new AppError(
      'precondition_failed',
      'OBJECT_CHANGED',
      'the object is not the one named by If-Match: it was replaced since it was read; nothing was deleted',
    ),
  storeUnavailable: (cause: unknown) => errors.dependencyUnavailable('object store', cause),
  uploadNotFound: () =>
    errors.notFound('UPLOAD_NOT_FOUND', 'no such upload of yours: never made, completed, aborted or expired'),
  tooManyWriteUrls: (limit: number) =>
    errors.conflict(
      'TOO_MANY_WRITE_URLS',
      `you have write URLs open for ${limit} keys, the most there may be (object_store.max_open_write_urls): wait ` +
        'for some to expire, or ask again for a key you have one of',
    ),
  tooManyUploads: (limit: number) =>
    errors.conflict(
      'TOO_MANY_UPLOADS',
      `you have ${limit} unfinished uploads, the most there may be: complete or abort one (they expire by themselves)`,
    ),
  lengthRequired: () =>
    errors.badRequest('LENGTH_REQUIRED', 'a part needs its Content-Length', { headers: { connection: 'close' } }),
  partTooSmall: (partNumber: number, min: number) =>
    errors.badRequest(
      'PART_TOO_SMALL',
      `part ${partNumber} is smaller than ${min} bytes: every part but the last must be at least that large`,
    ),
  noParts: () => errors.badRequest('NO_PARTS', 'the upload has no parts to join'),
  sourceChanged: () =>
    errors.conflict(
      'SOURCE_CHANGED',
      'the source object changed while it was copied: nothing was copied; copy it again',
    ),
  copyOntoItself: () =>
    errors.validation('an object cannot be copied onto itself', [
      { path: 'body.destination', message: 'the same object as body.source' },
    ]),
  partsChanged: (detail: string) => errors.conflict('PARTS_CHANGED', `${detail}; upload the parts again`),
};
