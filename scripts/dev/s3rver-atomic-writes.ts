/**
 * s3rver 3.7 writes an object's bytes straight into the object's file as they arrive: the file is truncated when a
 * PUT starts, and a PUT whose connection is cut before its Content-Length bytes arrived leaves what came so far in
 * place of the earlier object (with the earlier object's ETag). S3 and MinIO store a PUT only when its whole body
 * arrived, and until then keep serving the earlier object. This makes the dev server do the same, for PutObject,
 * UploadPart and CompleteMultipartUpload:
 * - the bytes go to a temporary file beside the object's (a name s3rver's listings skip), renamed over it only once
 *   the request body has ended, complete, with as many bytes as its Content-Length said; otherwise the temporary
 *   file is removed and the request fails with S3's 400 IncompleteBody (no one may be left to read it). The temporary
 *   name is short and the same for every key (`.incoming-<12 hex>`), so it takes no room from the key: the longest
 *   file name s3rver itself makes of a key's last segment, `<segment>._S3rver_metadata.json`, is what bounds a
 *   segment here (255 - 22 = 233 bytes; the storage service's `object_store.max_key_segment_bytes`);
 * - a part for a multipart upload that does not exist (never made, completed or aborted) is 404 NoSuchUpload, as on
 *   S3, instead of bringing the upload's folder back to life; a part number outside 1-10000 is 400 InvalidArgument
 *   (s3rver used both as parts of a file path).
 */
import { createHash, randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import type { IncomingMessage } from 'node:http';
import { createRequire } from 'node:module';
import path from 'node:path';
import { PassThrough, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type S3rver from 's3rver';

/** s3rver's own error class: what it answers as an S3 error document. */
const S3Error = createRequire(import.meta.url)('s3rver/lib/models/error') as new (
  code: string,
  message: string,
) => Error;

interface StoredObject {
  bucket: string;
  key: string;
  content: Readable | Buffer;
  metadata: Record<string, string>;
}

interface WritableStore {
  getResourcePath(bucket: string, key: string | undefined, resource: string): string;
  putMetadata(bucket: string, key: string, metadata: Record<string, string>, md5: string): Promise<void>;
  putObject(object: StoredObject): Promise<{ size: number; md5: string }>;
  putPart(
    bucket: string,
    uploadId: string,
    partNumber: number,
    content: Readable,
  ): Promise<{ size: number; md5: string }>;
}

/** What s3rver makes an upload ID of: 16 random bytes in hex. */
const UPLOAD_ID = /^[0-9a-f]{32}$/;

const incompleteBody = () =>
  new S3Error('IncompleteBody', 'You did not provide the number of bytes specified by the Content-Length HTTP header.');

/** A request body that ended before all of it arrived (s3rver hands the request itself to the store). */
function cutShort(content: Readable, size: number): boolean {
  const req = content as Partial<IncomingMessage>;
  if (req.complete === undefined || req.headers === undefined) return false;
  const declared = req.headers['content-length'];
  return !req.complete || (declared !== undefined && Number(declared) !== size);
}

/**
 * Writes the stream into `target` through a temporary file, renamed over `target` only when the stream ended whole;
 * the size and MD5 of what was written.
 */
async function writeWhole(content: Readable, target: string): Promise<{ size: number; md5: string }> {
  const temp = path.join(path.dirname(target), `.incoming-${randomBytes(6).toString('hex')}`);
  const md5 = createHash('md5');
  let size = 0;
  const counter = new PassThrough();
  counter.on('data', (chunk: Buffer) => {
    md5.update(chunk);
    size += chunk.length;
  });
  try {
    await pipeline(content, counter, createWriteStream(temp));
    if (cutShort(content, size)) throw incompleteBody();
    await rename(temp, target);
  } catch (err) {
    await rm(temp, { force: true });
    // A connection cut mid-body fails the pipeline with the request's own error (ECONNRESET, premature close).
    throw err instanceof S3Error ? err : incompleteBody();
  }
  return { size, md5: md5.digest('hex') };
}

/** Makes an s3rver instance store objects and parts only when their whole body arrived. */
export function addAtomicWrites(server: S3rver): void {
  const store = (server as unknown as { store: WritableStore }).store;
  const putObject = store.putObject.bind(store);
  store.putObject = async (object) => {
    if (Buffer.isBuffer(object.content)) return putObject(object);
    const objectPath = store.getResourcePath(object.bucket, object.key, 'object');
    await mkdir(path.dirname(objectPath), { recursive: true });
    const { size, md5 } = await writeWhole(object.content, objectPath);
    await store.putMetadata(object.bucket, object.key, object.metadata, md5);
    return { size, md5 };
  };
  store.putPart = async (bucket, uploadId, partNumber, content) => {
    const uploadDir = path.join(store.getResourcePath(bucket, undefined, 'uploads'), uploadId);
    // s3rver's upload IDs are 32 hex digits; anything else (a path, say) names no upload.
    const exists =
      UPLOAD_ID.test(uploadId) &&
      (await stat(uploadDir).then(
        (s) => s.isDirectory(),
        () => false,
      ));
    if (!exists) {
      content.resume();
      throw new S3Error(
        'NoSuchUpload',
        'The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed.',
      );
    }
    if (!/^[1-9]\d{0,4}$/.test(String(partNumber)) || Number(partNumber) > 10_000) {
      content.resume();
      throw new S3Error('InvalidArgument', 'Part number must be an integer between 1 and 10000, inclusive');
    }
    const partPath = path.join(uploadDir, String(partNumber));
    const { size, md5 } = await writeWhole(content, partPath);
    await writeFile(`${partPath}.md5`, md5);
    return { size, md5 };
  };
}
