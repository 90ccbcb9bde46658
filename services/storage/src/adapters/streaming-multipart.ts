/**
 * Multipart upload of a body whose length is known (Content-Length), with
 * every part streamed straight from the request to the store: memory stays at
 * a few stream buffers whatever the object or part size. Parts go one after
 * another, since one request body can only be read in order. On any failure
 * the multipart upload is aborted, so nothing half-finished stays behind.
 */
import { once } from 'node:events';
import { PassThrough, type Readable } from 'node:stream';
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  type S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3';

export interface StreamingMultipartRequest {
  bucket: string;
  key: string;
  body: Readable;
  contentType: string;
  contentLength: number;
  partSize: number;
  signal?: AbortSignal;
}

export class BodyLengthMismatch extends Error {}

/** Writes exactly `length` bytes from the iterator into `part`; returns any bytes read beyond them. */
async function feedPart(
  source: AsyncIterator<Buffer>,
  part: PassThrough,
  length: number,
  carry: Buffer | undefined,
  sending: Promise<unknown>,
): Promise<Buffer | undefined> {
  let need = length;
  let leftover = carry;
  // A part upload that fails stops the feeding instead of waiting forever for 'drain'.
  const failure = sending.then(() => new Promise<never>(() => {}));
  while (need > 0) {
    let chunk = leftover;
    leftover = undefined;
    if (!chunk) {
      const next = await source.next();
      if (next.done) throw new BodyLengthMismatch('request body is shorter than its Content-Length');
      chunk = next.value;
    }
    if (chunk.length > need) {
      leftover = chunk.subarray(need);
      chunk = chunk.subarray(0, need);
    }
    need -= chunk.length;
    if (!part.write(chunk)) await Promise.race([once(part, 'drain'), failure]);
  }
  part.end();
  return leftover;
}

export async function streamingMultipartUpload(s3: S3Client, req: StreamingMultipartRequest): Promise<void> {
  const { bucket: Bucket, key: Key } = req;
  const created = await s3.send(new CreateMultipartUploadCommand({ Bucket, Key, ContentType: req.contentType }), {
    abortSignal: req.signal,
  });
  const UploadId = created.UploadId;
  try {
    const source = req.body[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
    const parts: Array<{ PartNumber: number; ETag: string | undefined }> = [];
    let carry: Buffer | undefined;
    let remaining = req.contentLength;
    for (let PartNumber = 1; remaining > 0; PartNumber++) {
      const length = Math.min(req.partSize, remaining);
      const part = new PassThrough();
      const sending = s3.send(
        new UploadPartCommand({ Bucket, Key, UploadId, PartNumber, Body: part, ContentLength: length }),
        { abortSignal: req.signal },
      );
      try {
        carry = await feedPart(source, part, length, carry, sending);
      } catch (err) {
        part.destroy();
        await sending.catch(() => {});
        throw err;
      }
      parts.push({ PartNumber, ETag: (await sending).ETag });
      remaining -= length;
    }
    if (carry?.length || !(await source.next()).done) {
      throw new BodyLengthMismatch('request body is longer than its Content-Length');
    }
    await s3.send(new CompleteMultipartUploadCommand({ Bucket, Key, UploadId, MultipartUpload: { Parts: parts } }));
  } catch (err) {
    await s3.send(new AbortMultipartUploadCommand({ Bucket, Key, UploadId })).catch(() => {});
    throw err;
  }
}
