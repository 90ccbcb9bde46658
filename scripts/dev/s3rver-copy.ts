/**
 * Copies at the store, as S3 and MinIO make them (the storage service's `POST /objects/copy`), on the dev server:
 * - CopyObject (PUT with `x-amz-copy-source`): s3rver 3.7 reads the source with `decodeURI`, so a key with `?`, `#`,
 *   `&`, `+` or `%` in it names another object, and it makes a missing destination bucket's folder instead of
 *   answering NoSuchBucket; nor does it check `x-amz-copy-source-if-match`;
 * - UploadPartCopy (the same header on a part of a multipart upload, with `x-amz-copy-source-range`): s3rver answers
 *   "not implemented".
 * Both are served here from s3rver's own files: the source as S3 names it (URL-encoded, `bucket/key`), its ETag the
 * MD5 s3rver keeps beside it, a part written through the store's `putPart` (whole or not at all:
 * s3rver-atomic-writes.ts). The signed headers are read, never rewritten (s3rver-sigv4.ts checked them first).
 */
import { createReadStream, existsSync } from 'node:fs';
import { stat } from 'node:fs/promises';
import path from 'node:path';
import type { Readable } from 'node:stream';
import type S3rver from 's3rver';
import { addMiddleware, answer, type KoaContext, s3Error, xmlEscape } from './s3rver-koa.ts';

interface CopyStore {
  rootDirectory: string;
  getResourcePath(bucket: string, key: string | undefined, resource: string): string;
  getMetadata(bucket: string, key: string): Promise<Record<string, string>>;
  copyObject(
    srcBucket: string,
    srcKey: string,
    destBucket: string,
    destKey: string,
    replacementMetadata: null,
  ): Promise<Record<string, string>>;
  putPart(bucket: string, uploadId: string, partNumber: number, content: Readable): Promise<{ md5: string }>;
}

/** `bucket/key` (a leading `/` and a `?versionId=` aside), each part URL-decoded as S3 decodes it. */
function sourceOf(header: string): { bucket: string; key: string } | undefined {
  const value = header.replace(/^\//, '').replace(/\?versionId=.*$/, '');
  const slash = value.indexOf('/');
  if (slash <= 0) return undefined;
  try {
    return { bucket: decodeURIComponent(value.slice(0, slash)), key: decodeURIComponent(value.slice(slash + 1)) };
  } catch {
    return undefined;
  }
}

const COPY_RANGE = /^bytes=(\d+)-(\d+)$/;

/** Serves CopyObject and UploadPartCopy on an s3rver instance (before its router; after the atomic writes). */
export function addCopies(server: S3rver): void {
  const store = (server as unknown as { store: CopyStore }).store;
  const bucketExists = (bucket: string) => existsSync(path.join(store.rootDirectory, bucket));
  const middleware = async (ctx: KoaContext, next: () => Promise<void>) => {
    const header = ctx.headers['x-amz-copy-source'];
    if (ctx.method !== 'PUT' || header === undefined) return next();
    const url = new URL(ctx.url, 'http://s3rver');
    // The bucket, and the key as it is (a folder marker's trailing `/` kept).
    const path = url.pathname.slice(1);
    const slash = path.indexOf('/');
    if (slash <= 0) return next();
    const bucket = decodeURIComponent(path.slice(0, slash));
    const key = decodeURIComponent(path.slice(slash + 1));
    const source = sourceOf(header);
    if (key === '') return next();
    if (!source) return s3Error(ctx, 400, 'InvalidArgument', 'Copy Source must mention the source bucket and key');
    if (!bucketExists(bucket)) return s3Error(ctx, 404, 'NoSuchBucket', 'The specified bucket does not exist');
    if (!bucketExists(source.bucket)) {
      return s3Error(ctx, 404, 'NoSuchBucket', 'The specified bucket does not exist');
    }
    const sourcePath = store.getResourcePath(source.bucket, source.key, 'object');
    const size = await stat(sourcePath).then(
      (s) => s.size,
      () => undefined,
    );
    if (size === undefined) return s3Error(ctx, 404, 'NoSuchKey', 'The specified key does not exist.');
    // s3rver's own metadata: its ETag the object's MD5 (which it makes when missing).
    const etag = (await store.getMetadata(source.bucket, source.key)).etag ?? '';
    const ifMatch = ctx.headers['x-amz-copy-source-if-match'];
    if (ifMatch !== undefined && ifMatch !== etag && ifMatch !== '*') {
      return s3Error(ctx, 412, 'PreconditionFailed', 'At least one of the pre-conditions you specified did not hold');
    }
    const uploadId = url.searchParams.get('uploadId');
    if (uploadId === null) {
      if (source.bucket === bucket && source.key === key) {
        return s3Error(ctx, 400, 'InvalidRequest', 'This copy request is illegal: it copies an object onto itself');
      }
      const copied = await store.copyObject(source.bucket, source.key, bucket, key, null);
      return answer(
        ctx,
        200,
        `<CopyObjectResult><LastModified>${new Date(copied['last-modified'] ?? Date.now()).toISOString()}</LastModified>` +
          `<ETag>${xmlEscape(copied.etag ?? etag)}</ETag></CopyObjectResult>`,
      );
    }
    const range = ctx.headers['x-amz-copy-source-range'];
    const m = range === undefined ? undefined : COPY_RANGE.exec(range);
    if (range !== undefined && (!m || Number(m[2]) < Number(m[1]) || Number(m[2]) >= size)) {
      return s3Error(ctx, 400, 'InvalidArgument', 'The x-amz-copy-source-range value must be within the source');
    }
    const body = createReadStream(sourcePath, m ? { start: Number(m[1]), end: Number(m[2]) } : {});
    try {
      const { md5 } = await store.putPart(bucket, uploadId, Number(url.searchParams.get('partNumber')), body);
      answer(
        ctx,
        200,
        `<CopyPartResult><LastModified>${new Date().toISOString()}</LastModified><ETag>"${md5}"</ETag></CopyPartResult>`,
      );
    } catch (err) {
      body.destroy();
      const e = err as { code?: string; status?: number; message: string };
      if (!e.code || !e.status) throw err;
      s3Error(ctx, e.status, e.code, e.message);
    }
  };
  addMiddleware(server, middleware);
}
