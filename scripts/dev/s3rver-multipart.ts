/**
 * s3rver 3.7 stores multipart uploads but answers AbortMultipartUpload, ListMultipartUploads and ListParts with
 * "not implemented". This middleware serves them from s3rver's own upload folders (a part is the file `<number>`,
 * with its MD5 beside it in `<number>.md5`, written by s3rver-atomic-writes.ts), so the storage service's "no
 * half-finished upload left behind" promise and its resumable uploads can be checked against the dev server as they
 * would be against MinIO or S3.
 */
import { existsSync } from 'node:fs';
import { readdir, readFile, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import type S3rver from 's3rver';
import { addMiddleware, type KoaContext, s3Error, xmlEscape } from './s3rver-koa.ts';

interface UploadStore {
  getResourcePath(bucket: string, key: string | undefined, resource: string): string;
  rootDirectory: string;
}

/** What s3rver makes an upload ID of: 16 random bytes in hex (anything else, a path say, names no upload). */
const UPLOAD_ID = /^[0-9a-f]{32}$/;

async function listUploads(store: UploadStore, bucket: string): Promise<string> {
  const dir = store.getResourcePath(bucket, undefined, 'uploads');
  const ids = existsSync(dir) ? await readdir(dir) : [];
  const uploads = await Promise.all(
    ids.map(async (id) => {
      const key = await readFile(path.join(dir, id, 'key'), 'utf8').catch(() => '');
      const initiated = (await stat(path.join(dir, id))).birthtime.toISOString();
      return `<Upload><Key>${xmlEscape(key)}</Key><UploadId>${xmlEscape(id)}</UploadId><Initiated>${initiated}</Initiated></Upload>`;
    }),
  );
  return (
    '<?xml version="1.0" encoding="UTF-8"?>\n<ListMultipartUploadsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">' +
    `<Bucket>${xmlEscape(bucket)}</Bucket><KeyMarker></KeyMarker><UploadIdMarker></UploadIdMarker>` +
    `<MaxUploads>1000</MaxUploads><IsTruncated>false</IsTruncated>${uploads.join('')}</ListMultipartUploadsResult>`
  );
}

async function listParts(dir: string, bucket: string, key: string, uploadId: string): Promise<string> {
  const names = (await readdir(dir)).filter((name) => /^\d+$/.test(name)).sort((a, b) => Number(a) - Number(b));
  const parts = await Promise.all(
    names.map(async (name) => {
      const file = await stat(path.join(dir, name));
      const md5 = await readFile(path.join(dir, `${name}.md5`), 'utf8').catch(() => '');
      return (
        `<Part><PartNumber>${name}</PartNumber><LastModified>${file.mtime.toISOString()}</LastModified>` +
        `<ETag>"${xmlEscape(md5)}"</ETag><Size>${file.size}</Size></Part>`
      );
    }),
  );
  return (
    '<?xml version="1.0" encoding="UTF-8"?>\n<ListPartsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">' +
    `<Bucket>${xmlEscape(bucket)}</Bucket><Key>${xmlEscape(key)}</Key><UploadId>${xmlEscape(uploadId)}</UploadId>` +
    `<MaxParts>10000</MaxParts><IsTruncated>false</IsTruncated>${parts.join('')}</ListPartsResult>`
  );
}

/** Adds AbortMultipartUpload, ListMultipartUploads and ListParts to an s3rver instance (before its router). */
export function addMultipartManagement(server: S3rver): void {
  const store = (server as unknown as { store: UploadStore }).store;
  const middleware = async (ctx: KoaContext, next: () => Promise<void>) => {
    const url = new URL(ctx.url, 'http://s3rver');
    const parts = url.pathname.split('/').filter(Boolean).map(decodeURIComponent);
    const bucket = parts[0];
    if (!bucket) return next();
    const bucketExists = existsSync(path.join(store.rootDirectory, bucket));
    const uploadId = url.searchParams.get('uploadId');
    if (parts.length >= 2 && uploadId !== null && (ctx.method === 'DELETE' || ctx.method === 'GET')) {
      // AbortMultipartUpload (DELETE) or ListParts (GET) of one upload.
      const dir = path.join(store.getResourcePath(bucket, undefined, 'uploads'), uploadId);
      if (!bucketExists) return s3Error(ctx, 404, 'NoSuchBucket', 'The specified bucket does not exist');
      if (!UPLOAD_ID.test(uploadId) || !existsSync(dir)) {
        return s3Error(ctx, 404, 'NoSuchUpload', 'The specified upload does not exist');
      }
      if (ctx.method === 'DELETE') {
        await rm(dir, { recursive: true, force: true });
        ctx.status = 204;
        ctx.body = null;
      } else {
        ctx.status = 200;
        ctx.type = 'application/xml';
        ctx.body = await listParts(dir, bucket, parts.slice(1).join('/'), uploadId);
      }
      return;
    }
    if (ctx.method === 'GET' && parts.length === 1 && url.searchParams.has('uploads')) {
      if (!bucketExists) return s3Error(ctx, 404, 'NoSuchBucket', 'The specified bucket does not exist');
      ctx.status = 200;
      ctx.type = 'application/xml';
      ctx.body = await listUploads(store, bucket);
      return;
    }
    return next();
  };
  addMiddleware(server, middleware);
}
