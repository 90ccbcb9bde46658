/**
 * Multipart uploads from a request body, in memory that does not grow with the object.
 * - Known length (Content-Length): every part streams straight from the request to the store, one after
 *   another (one request body can only be read in order). Nothing is buffered.
 * - Unknown length (chunked): each part is gathered in one of `queueSize` part buffers, allocated once per
 *   upload and reused, while the parts before it upload (at most `queueSize` at once). A body that fits in one
 *   part is a plain PUT. (Filling the next part while `queueSize` parts upload was faster, but took one buffer
 *   more: a chunked 1 GiB upload then peaked at 199-202 MB of RSS instead of 184-187 MB.)
 * - A copy too large for one copy request: parts the store copies from the source itself (`multipartCopy`).
 * On any failure the multipart upload is aborted, so nothing half-finished stays behind.
 */
import { once } from 'node:events';
import { PassThrough, type Readable } from 'node:stream';
import {
  AbortMultipartUploadCommand,
  type CompletedPart,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  PutObjectCommand,
  type S3Client,
  UploadPartCommand,
  UploadPartCopyCommand,
} from '@aws-sdk/client-s3';
import { forEachLimited } from '@gpu/common';

/** Where a multipart upload goes, and what it is. */
interface MultipartTarget {
  bucket: string;
  key: string;
  contentType: string;
  signal?: AbortSignal;
}

export interface MultipartRequest extends MultipartTarget {
  body: Readable;
  partSize: number;
}

export class BodyLengthMismatch extends Error {}

/** Sends one part; `stop`, when given, cuts that part's request short as well as the upload's own signal. */
type SendPart = (
  partNumber: number,
  body: Readable | Buffer,
  length: number,
  stop?: AbortSignal,
) => Promise<CompletedPart>;

/** Creates a multipart upload, lets `makeParts` make its parts, completes it; aborts it on any failure. */
async function inMultipartUpload(
  s3: S3Client,
  req: MultipartTarget,
  makeParts: (uploadId: string | undefined) => Promise<CompletedPart[]>,
): Promise<void> {
  const { bucket: Bucket, key: Key, signal: abortSignal } = req;
  // Not cut by the signal: a creation aborted in flight can still be made by the store, whose upload ID would then
  // never come back to abort it with. A signal that fired meanwhile aborts the upload just made.
  const created = await s3.send(new CreateMultipartUploadCommand({ Bucket, Key, ContentType: req.contentType }));
  const UploadId = created.UploadId;
  try {
    abortSignal?.throwIfAborted();
    const parts = await makeParts(UploadId);
    await s3.send(new CompleteMultipartUploadCommand({ Bucket, Key, UploadId, MultipartUpload: { Parts: parts } }));
  } catch (err) {
    await s3.send(new AbortMultipartUploadCommand({ Bucket, Key, UploadId })).catch(() => {});
    throw err;
  }
}

/** A multipart upload whose parts `uploadParts` sends from a body. */
function multipartUpload(
  s3: S3Client,
  req: MultipartRequest,
  uploadParts: (sendPart: SendPart) => Promise<CompletedPart[]>,
): Promise<void> {
  const { bucket: Bucket, key: Key, signal: abortSignal } = req;
  return inMultipartUpload(s3, req, (UploadId) =>
    uploadParts(async (PartNumber, Body, ContentLength, stop) => {
      const signals = [abortSignal, stop].filter((signal) => signal !== undefined);
      const out = await s3.send(new UploadPartCommand({ Bucket, Key, UploadId, PartNumber, Body, ContentLength }), {
        abortSignal: signals.length > 1 ? AbortSignal.any(signals) : signals[0],
      });
      return { PartNumber, ETag: out.ETag };
    }),
  );
}

export interface MultipartCopyRequest extends MultipartTarget {
  /** The source as S3 names it: `bucket/key`, URL-encoded. */
  copySource: string;
  /** The source's ETag when the copy began: every part is of that version (else the store answers 412). */
  etag: string | undefined;
  /** The source's bytes. */
  size: number;
  partSize: number;
  /** Parts the store copies at once. */
  queueSize: number;
}

/**
 * Copies an object larger than one copy request takes (S3: 5 GiB) in parts the store copies itself
 * (UploadPartCopy, each a byte range of the source), `queueSize` at once. A part that fails, or the caller gone
 * (`signal`), stops the parts not started yet; those under way are let end (cut here, the store would go on with them),
 * and only then is the upload aborted: a part still copying when its upload is aborted might be stored after all, S3
 * warns, and nothing of the copy is to stay behind.
 */
export function multipartCopy(s3: S3Client, req: MultipartCopyRequest): Promise<void> {
  const { bucket: Bucket, key: Key, copySource: CopySource, etag: CopySourceIfMatch } = req;
  const starts = Array.from({ length: Math.ceil(req.size / req.partSize) }, (_, i) => i * req.partSize);
  return inMultipartUpload(s3, req, async (UploadId) => {
    const parts: CompletedPart[] = [];
    let failed: { err: unknown } | undefined;
    await forEachLimited(starts, req.queueSize, async (start, i) => {
      if (!failed && req.signal?.aborted) failed = { err: req.signal.reason };
      if (failed) return;
      try {
        const end = Math.min(start + req.partSize, req.size) - 1;
        const out = await s3.send(
          new UploadPartCopyCommand({
            Bucket,
            Key,
            UploadId,
            PartNumber: i + 1,
            CopySource,
            CopySourceIfMatch,
            CopySourceRange: `bytes=${start}-${end}`,
          }),
        );
        parts[i] = { PartNumber: i + 1, ETag: out.CopyPartResult?.ETag };
      } catch (err) {
        failed ??= { err };
      }
    });
    if (failed) throw failed.err;
    return parts;
  });
}

/** Reads a request body in chunks of at most a given size; the rest of a longer chunk waits for the next call. */
class BodyReader {
  private readonly source: AsyncIterator<Buffer>;
  private carry: Buffer | undefined;

  constructor(body: Readable) {
    this.source = body[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
  }

  /** The body's next bytes, at most `max` of them; undefined at its end. */
  async next(max: number): Promise<Buffer | undefined> {
    let chunk = this.carry;
    this.carry = undefined;
    if (!chunk) {
      const next = await this.source.next();
      if (next.done) return undefined;
      chunk = next.value;
    }
    if (chunk.length > max) {
      this.carry = chunk.subarray(max);
      chunk = chunk.subarray(0, max);
    }
    return chunk;
  }
}

/** Writes exactly `length` bytes of the body into `part`, then ends it. */
async function feedPart(reader: BodyReader, part: PassThrough, length: number, sending: Promise<unknown>) {
  let need = length;
  // A part upload that fails stops the feeding instead of waiting forever for 'drain'.
  const failure = sending.then(() => new Promise<never>(() => {}));
  // Raced only while waiting for 'drain': a part that fails when nobody waits so (the body cut short, the part
  // aborted by the caller) is the caller's to handle through `sending`, never an unhandled rejection here.
  failure.catch(() => {});
  while (need > 0) {
    const chunk = await reader.next(need);
    if (!chunk) throw new BodyLengthMismatch('request body is shorter than its Content-Length');
    need -= chunk.length;
    if (!part.write(chunk)) await Promise.race([once(part, 'drain'), failure]);
  }
  part.end();
}

/** Uploads a body of known length, every part streamed from the request unbuffered. */
export async function streamingMultipartUpload(
  s3: S3Client,
  req: MultipartRequest & { contentLength: number },
): Promise<void> {
  const reader = new BodyReader(req.body);
  await multipartUpload(s3, req, async (sendPart) => {
    const parts: CompletedPart[] = [];
    let remaining = req.contentLength;
    for (let partNumber = 1; remaining > 0; partNumber++) {
      const length = Math.min(req.partSize, remaining);
      const part = new PassThrough();
      const stop = new AbortController();
      const sending = sendPart(partNumber, part, length, stop.signal);
      try {
        await feedPart(reader, part, length, sending);
      } catch (err) {
        // The part's request still waits for the bytes its Content-Length promised (a body that ended early while
        // its request's signal stays quiet): cut it, or it would wait until the store's timeout.
        stop.abort(err);
        part.destroy();
        await sending.catch(() => {});
        throw err;
      }
      parts.push(await sending);
      remaining -= length;
    }
    if (await reader.next(1)) {
      throw new BodyLengthMismatch('request body is longer than its Content-Length');
    }
    return parts;
  });
}

/**
 * Uploads a body of unknown length. Each part is copied out of the request's chunks into a reused part buffer:
 * the chunks die young, and the part buffers are the only large allocations, made once. (lib-storage's Upload,
 * used here before, concatenated a new buffer for every part and held the request's chunks until then; on the
 * benchmark VM that cost about three times the CPU per GiB, most of it in garbage collection.)
 */
export async function bufferedMultipartUpload(
  s3: S3Client,
  req: MultipartRequest & { queueSize: number },
): Promise<void> {
  const reader = new BodyReader(req.body);
  const free: Buffer[] = [];
  const partBuffer = () => free.pop() ?? Buffer.allocUnsafeSlow(req.partSize);
  /** Fills `buffer` from the body; fewer bytes than its size means the body has ended. */
  const fill = async (buffer: Buffer): Promise<number> => {
    let filled = 0;
    for (let chunk = await reader.next(buffer.length); chunk; chunk = await reader.next(buffer.length - filled)) {
      filled += chunk.copy(buffer, filled);
      if (filled === buffer.length) break;
    }
    return filled;
  };

  const first = partBuffer();
  const firstLength = await fill(first);
  if (firstLength < req.partSize) {
    await s3.send(
      new PutObjectCommand({
        Bucket: req.bucket,
        Key: req.key,
        Body: first.subarray(0, firstLength),
        ContentLength: firstLength,
        ContentType: req.contentType,
      }),
      { abortSignal: req.signal },
    );
    return;
  }
  await multipartUpload(s3, req, async (sendPart) => {
    const parts: CompletedPart[] = [];
    const inFlight = new Set<Promise<void>>();
    let failed: { err: unknown } | undefined;
    const start = (partNumber: number, buffer: Buffer, length: number) => {
      const sending: Promise<void> = sendPart(partNumber, buffer.subarray(0, length), length)
        .then(
          (part) => {
            parts[partNumber - 1] = part;
            free.push(buffer);
          },
          (err: unknown) => {
            failed ??= { err };
          },
        )
        .finally(() => inFlight.delete(sending));
      inFlight.add(sending);
    };
    try {
      let buffer = first;
      let length = firstLength;
      for (let partNumber = 1; length > 0 && !failed; partNumber++) {
        start(partNumber, buffer, length);
        if (length < req.partSize) break;
        while (inFlight.size >= req.queueSize && !failed) await Promise.race(inFlight);
        if (failed) break;
        buffer = partBuffer();
        length = await fill(buffer);
      }
    } finally {
      // Parts still uploading settle before the upload is completed or aborted (an abort racing a part upload
      // can leave that part behind on some stores).
      await Promise.all(inFlight);
    }
    if (failed) throw failed.err;
    return parts;
  });
}
