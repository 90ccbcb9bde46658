/** Maps object-store (S3 SDK) failures onto the service's errors. */
import { AppError, errors, isDependencyDown } from '@gpu/common';
import { NotModified } from '../domain/store.ts';
import { storageErrors } from '../errors.ts';
import { BodyLengthMismatch } from './multipart.ts';

interface S3ErrorShape {
  name?: string;
  Code?: string;
  $metadata?: { httpStatusCode?: number };
  $response?: { headers?: Record<string, string> };
}

/** Where the failed request went: its bucket, key, and whether it was a step of a multipart upload. */
interface Where {
  bucket?: string;
  key?: string;
  upload?: boolean;
}

/** A store failure's S3 error name and HTTP status, where it has them. */
export function storeFailure(err: unknown): { name?: string; status?: number } {
  const e = err as S3ErrorShape;
  return { name: e.name ?? e.Code, status: e.$metadata?.httpStatusCode };
}

export function mapStoreError(err: unknown, where: Where): Error {
  if (err instanceof AppError || err instanceof NotModified) return err;
  if (err instanceof BodyLengthMismatch) return storageErrors.incompleteBody(err.message);
  const e = err as S3ErrorShape;
  const status = e.$metadata?.httpStatusCode;
  const name = e.name ?? e.Code;
  if (name === 'AbortError') return err as Error;
  if (status === 304 || name === 'NotModified') {
    const headers = e.$response?.headers ?? {};
    return new NotModified(headers.etag, headers['last-modified']);
  }
  if (name === 'NoSuchBucket') return storageErrors.bucketNotFound(where.bucket ?? '');
  if (name === 'NoSuchUpload' || (status === 404 && where.upload)) return storageErrors.uploadNotFound();
  if (name === 'InvalidPart' || name === 'InvalidPartOrder') {
    return storageErrors.partsChanged(`the store refused the parts: ${name}`);
  }
  if (name === 'EntityTooSmall') return storageErrors.partsChanged('the store refused a part as too small');
  if (name === 'NoSuchKey' || (status === 404 && where.key !== undefined)) {
    return storageErrors.objectNotFound(where.bucket ?? '', where.key ?? '');
  }
  if (status === 404 && where.bucket !== undefined) return storageErrors.bucketNotFound(where.bucket);
  if (name === 'InvalidRange' || status === 416)
    return storageErrors.rangeNotSatisfiable('requested range not satisfiable');
  if (name === 'PreconditionFailed' || status === 412) return storageErrors.preconditionFailed('precondition failed');
  if (name === 'EntityTooLarge') return errors.payloadTooLarge('object too large for the store');
  if (isDependencyDown(err) || name === 'TimeoutError' || (status !== undefined && status >= 500)) {
    return storageErrors.storeUnavailable(err);
  }
  return new AppError(
    'dependency_failed',
    'OBJECT_STORE_ERROR',
    `object store refused the request: ${name ?? 'unknown error'}`,
    {
      cause: err,
    },
  );
}

/**
 * A copy's failures (a whole object's, or one part's into an upload, `destination.upload`): the source was found
 * (its HEAD came first), so a missing key is the source deleted since, a missing bucket the destination's, and a
 * failed precondition the source changed since (its ETag no longer holds).
 */
export function mapCopyError(err: unknown, source: { bucket: string; key: string }, destination: Where): Error {
  const e = err as S3ErrorShape;
  const name = e.name ?? e.Code;
  if (name === 'NoSuchUpload') return storageErrors.uploadNotFound();
  if (name === 'NoSuchKey') return storageErrors.objectNotFound(source.bucket, source.key);
  if (name === 'NoSuchBucket') return storageErrors.bucketNotFound(destination.bucket ?? '');
  if (name === 'PreconditionFailed' || e.$metadata?.httpStatusCode === 412) return storageErrors.sourceChanged();
  return mapStoreError(err, destination);
}
