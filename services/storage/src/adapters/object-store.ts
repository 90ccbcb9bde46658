/**
 * The domain's `ObjectStore` over @aws-sdk/client-s3: the client (connections
 * reading into reused buffers, unsigned upload payloads), the choice of a
 * plain PUT or a multipart upload (`multipart.ts`), and the store's failures
 * mapped onto the service's errors (`store-errors.ts`). Checksums are computed
 * only when an operation requires them: right for s3rver, older MinIO and
 * most S3-compatible stores (see ENVIRONMENT.md).
 */

import { Readable } from 'node:stream';
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CopyObjectCommand,
  CreateBucketCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  ListBucketsCommand,
  ListObjectsV2Command,
  ListPartsCommand,
  PutObjectCommand,
  S3Client,
  UploadPartCommand,
  UploadPartCopyCommand,
} from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import type { Logger } from '@gpu/common';
import type { StorageConfig } from '../config.ts';
import type {
  CopyRequest,
  ObjectBody,
  ObjectHead,
  ObjectStore,
  PartCopyRequest,
  PartInfo,
  PartRequest,
  ReadConditions,
  StoredPart,
  StorePage,
  StorePageRequest,
  UploadRequest,
} from '../domain/store.ts';
import { storageErrors } from '../errors.ts';
import { bufferedMultipartUpload, multipartCopy, streamingMultipartUpload } from './multipart.ts';
import { ReadBufferAgent } from './read-buffer-agent.ts';
import { mapCopyError, mapStoreError, storeFailure } from './store-errors.ts';

type StoreSettings = StorageConfig['object_store'];

/** Size of each store connection's read buffer (read-buffer-agent.ts): Node's own read size. */
const STORE_READ_SIZE = 64 * 1024;

/** Commands whose bodies the SDK would otherwise hash in full to sign them. */
const UPLOAD_COMMANDS = new Set(['PutObjectCommand', 'UploadPartCommand']);

/**
 * Signs upload bodies as `UNSIGNED-PAYLOAD`, as the SDK already does for every streamed body: without it, each
 * buffered part of a chunked upload was hashed with SHA-256 just to sign it, about 1.3 CPU seconds
 * per GiB on the benchmark VM. The store still checks the signature over method, path and headers, and an https
 * endpoint protects the bytes in transit, as for every streamed upload.
 */
function signUploadsUnsigned(s3: S3Client): void {
  s3.middlewareStack.add(
    (next, context) => (args) => {
      const request = args.request as { headers?: Record<string, string> };
      if (UPLOAD_COMMANDS.has(context.commandName ?? '') && request.headers) {
        request.headers['x-amz-content-sha256'] = 'UNSIGNED-PAYLOAD';
      }
      return next(args);
    },
    { step: 'build', name: 'storageUnsignedPayload' },
  );
}

/**
 * The upload's signal, aborted also when its body fails or closes before its end. The SDK pipes a stream body into
 * its request and, when the body fails, would go on waiting for the bytes the request's Content-Length promised;
 * aborting cuts the request off short, and the store keeps nothing of it (S3 and MinIO store a PUT only whole; so
 * does the dev server, scripts/dev/s3rver-atomic-writes.ts). A multipart upload sees the failure itself (multipart.ts).
 */
function untilBodyFails(body: Readable, signal: AbortSignal | undefined): AbortSignal {
  const failed = new AbortController();
  body.once('close', () => {
    if (!body.readableEnded) failed.abort(body.errored ?? new Error('the upload body closed before its end'));
  });
  return signal ? AbortSignal.any([signal, failed.signal]) : failed.signal;
}

function endpointUrl(endpoint: string, useSsl: boolean): string {
  return /^https?:\/\//.test(endpoint) ? endpoint : `${useSsl ? 'https' : 'http'}://${endpoint}`;
}

/** The SDK's note that a failed request with a streamed body is not sent again (its error reaches the caller). */
const NOT_RETRIED = /non-retryable streaming request/;

/**
 * The SDK's warnings in the service's log (without a logger it writes them on the console, bare), but for the note
 * above, which is no warning here (at debug): an upload whose client went away, or a write into a bucket not made yet,
 * fails so, and the caller answers or logs it. So is each failed command the SDK logs as an error (a HEAD of an
 * object that is not there among them): at debug, the caller judging. Its info lines (every command, with its input)
 * and debug lines are left out.
 */
function sdkLogger(logger: Logger) {
  const text = (content: unknown[]) => content.map((c) => (typeof c === 'string' ? c : String(c))).join(' ');
  const component = 's3-client';
  return {
    debug: () => {},
    info: () => {},
    warn: (...content: unknown[]) => {
      const line = text(content);
      if (NOT_RETRIED.test(line)) logger.debug({ component }, line);
      else logger.warn({ component }, line);
    },
    error: (failure: { commandName?: string; error?: { message?: string } }) => {
      if (!logger.isLevelEnabled('debug')) return;
      logger.debug({ component, command: failure?.commandName, err: failure?.error?.message }, 'store command failed');
    },
  };
}

/** Connections to the store for the requests of everything but copies (the SDK's own agent's number). */
const STORE_SOCKETS = 50;

/** Connections to the store for copies, apart: a copy holds one until the store has copied it (minutes, for GiBs). */
const COPY_SOCKETS = 16;

function client(settings: StoreSettings, endpoint: string, logger?: Logger, maxSockets = STORE_SOCKETS): S3Client {
  const url = endpointUrl(endpoint, settings.use_ssl);
  const s3 = new S3Client({
    ...(logger ? { logger: sdkLogger(logger) } : {}),
    // Plain-http stores get sockets that read into one reused buffer (read-buffer-agent.ts), pooled as the SDK's
    // own agent pools them (keep-alive, `maxSockets`: 50 as the SDK's); https the SDK's agent, of `maxSockets` too.
    ...(url.startsWith('http:')
      ? { requestHandler: { httpAgent: new ReadBufferAgent(STORE_READ_SIZE, { keepAlive: true, maxSockets }) } }
      : { requestHandler: { httpsAgent: { keepAlive: true, maxSockets } } }),
    endpoint: url,
    region: settings.region || 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: settings.access_key_id, secretAccessKey: settings.secret_access_key },
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
  });
  signUploadsUnsigned(s3);
  return s3;
}

/** S3's `x-amz-copy-source`: the bucket and key, each URL-encoded (the key's `/` kept). */
const copySourceOf = (source: { bucket: string; key: string }) =>
  `${encodeURIComponent(source.bucket)}/${encodeURIComponent(source.key).replace(/%2F/g, '/')}`;

/** The store over S3; `waitUntilReachable` is the server's start-up check. */
export class S3ObjectStore implements ObjectStore {
  private readonly s3: S3Client;
  /** The client of copies (`copy`), with connections of its own. */
  private readonly copier: S3Client;
  private readonly signer: S3Client;

  /** `logger`: where the SDK's own lines go (the console without one). */
  constructor(
    private readonly settings: StoreSettings,
    logger?: Logger,
  ) {
    this.s3 = client(settings, settings.endpoint, logger);
    this.copier = client(settings, settings.endpoint, logger, COPY_SOCKETS);
    this.signer = settings.public_endpoint ? client(settings, settings.public_endpoint, logger) : this.s3;
  }

  async ping(): Promise<void> {
    try {
      await this.s3.send(new ListBucketsCommand({}));
    } catch (err) {
      throw mapStoreError(err, {});
    }
  }

  async waitUntilReachable(timeoutMs: number, log: Logger): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (let attempt = 1; ; attempt++) {
      try {
        await this.s3.send(new ListBucketsCommand({}));
        log.info({ endpoint: this.settings.endpoint }, 'object store connection test passed');
        return;
      } catch (err) {
        if (Date.now() > deadline) {
          throw new Error(`object store at ${this.settings.endpoint} unreachable: ${(err as Error).message}`);
        }
        log.warn({ err, attempt, endpoint: this.settings.endpoint }, 'object store not reachable yet, retrying');
        await new Promise((r) => setTimeout(r, Math.min(2000, 100 * 2 ** attempt)));
      }
    }
  }

  async ensureBucket(bucket: string): Promise<'created' | 'exists'> {
    try {
      await this.s3.send(new HeadBucketCommand({ Bucket: bucket }));
      return 'exists';
    } catch (err) {
      const status = (err as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;
      if (status !== 404) throw mapStoreError(err, { bucket });
    }
    try {
      await this.s3.send(new CreateBucketCommand({ Bucket: bucket }));
      return 'created';
    } catch (err) {
      const name = (err as Error).name;
      if (name === 'BucketAlreadyOwnedByYou' || name === 'BucketAlreadyExists') return 'exists';
      throw mapStoreError(err, { bucket });
    }
  }

  async upload(upload: UploadRequest): Promise<undefined> {
    const { part_size: partSize, queue_size: queueSize } = this.settings;
    if (Buffer.isBuffer(upload.body) && upload.body.length <= partSize)
      return this.putBytes({ ...upload, body: upload.body });
    const body = Buffer.isBuffer(upload.body) ? Readable.from([upload.body]) : upload.body;
    const req = { ...upload, body, signal: untilBodyFails(body, upload.signal) };
    try {
      const { contentLength } = req;
      if (contentLength !== undefined && contentLength <= partSize) {
        // Small bodies of known length stream straight through in one PUT.
        await this.s3.send(
          new PutObjectCommand({
            Bucket: req.bucket,
            Key: req.key,
            Body: req.body,
            ContentType: req.contentType,
            ContentLength: contentLength,
            IfNoneMatch: req.ifNoneMatch,
          }),
          { abortSignal: req.signal },
        );
      } else if (contentLength !== undefined) {
        // Known length: every part streams through, nothing is buffered.
        await streamingMultipartUpload(this.s3, { ...req, contentLength, partSize });
      } else {
        // Chunked body of unknown length: parts gathered in queueSize reused buffers of partSize.
        await bufferedMultipartUpload(this.s3, { ...req, partSize, queueSize });
      }
    } catch (err) {
      throw mapStoreError(err, { bucket: req.bucket, key: req.key });
    }
  }

  /**
   * Bytes held whole, in one PUT: not a streaming request, so the SDK sends it again after a failure that may pass,
   * and says nothing of one it does not retry (a missing bucket, a key already there: the caller's to judge).
   */
  private async putBytes(req: UploadRequest & { body: Buffer }): Promise<undefined> {
    try {
      await this.s3.send(
        new PutObjectCommand({
          Bucket: req.bucket,
          Key: req.key,
          Body: req.body,
          ContentType: req.contentType,
          ContentLength: req.body.length,
          IfNoneMatch: req.ifNoneMatch,
        }),
        { abortSignal: req.signal },
      );
    } catch (err) {
      throw mapStoreError(err, { bucket: req.bucket, key: req.key });
    }
  }

  /**
   * One CopyObject for a source up to `copy_part_size`, else a multipart copy in parts of that size (at least the
   * size's 10,000th: S3's most parts), each of the version the source's HEAD found (`x-amz-copy-source-if-match`).
   * Copies go through a client of their own (`COPY_SOCKETS`): a copy holds its connection until the store is done,
   * and so many of them cannot take the connections uploads and downloads need. A single copy is not cut off when its
   * caller goes away (the store would go on with it anyway): it ends, and is catalogued, as if the caller had stayed;
   * it is given up at `until`, the request's time limit, whatever happens.
   */
  async copy(req: CopyRequest): Promise<undefined> {
    const { source, destination } = req;
    const from = await this.head(source.bucket, source.key, {}).catch(async (err: unknown) => {
      // A HEAD's 404 has no body to tell a missing bucket from a missing key: the bucket is asked.
      if ((err as { code?: string }).code === 'OBJECT_NOT_FOUND') await this.bucketMustExist(source.bucket);
      throw err;
    });
    const copySource = copySourceOf(source);
    try {
      if (from.contentLength <= this.settings.copy_part_size) {
        await this.copier.send(
          new CopyObjectCommand({
            Bucket: destination.bucket,
            Key: destination.key,
            CopySource: copySource,
            CopySourceIfMatch: from.etag,
          }),
          { abortSignal: AbortSignal.timeout(Math.max(1, req.until.getTime() - Date.now())) },
        );
        return;
      }
      await multipartCopy(this.copier, {
        bucket: destination.bucket,
        key: destination.key,
        contentType: from.contentType,
        copySource,
        etag: from.etag,
        size: from.contentLength,
        partSize: Math.max(this.settings.copy_part_size, Math.ceil(from.contentLength / 10_000)),
        queueSize: this.settings.queue_size,
        signal: req.signal,
      });
    } catch (err) {
      throw mapCopyError(err, req.source, { bucket: req.destination.bucket, key: req.destination.key });
    }
  }

  async get(bucket: string, key: string, cond: ReadConditions, signal?: AbortSignal): Promise<ObjectBody> {
    try {
      const out = await this.s3.send(
        new GetObjectCommand({
          Bucket: bucket,
          Key: key,
          Range: cond.range,
          IfNoneMatch: cond.ifNoneMatch,
          IfModifiedSince: cond.ifModifiedSince,
        }),
        { abortSignal: signal },
      );
      return {
        body: out.Body as Readable,
        contentType: out.ContentType ?? 'application/octet-stream',
        contentLength: out.ContentLength ?? 0,
        etag: out.ETag,
        lastModified: out.LastModified,
        contentRange: out.ContentRange,
        partial: out.ContentRange !== undefined || out.$metadata.httpStatusCode === 206,
      };
    } catch (err) {
      throw mapStoreError(err, { bucket, key });
    }
  }

  async head(bucket: string, key: string, cond: ReadConditions): Promise<ObjectHead> {
    try {
      const out = await this.s3.send(
        new HeadObjectCommand({
          Bucket: bucket,
          Key: key,
          IfNoneMatch: cond.ifNoneMatch,
          IfModifiedSince: cond.ifModifiedSince,
        }),
      );
      return {
        contentType: out.ContentType ?? 'application/octet-stream',
        contentLength: out.ContentLength ?? 0,
        etag: out.ETag,
        lastModified: out.LastModified,
      };
    } catch (err) {
      throw mapStoreError(err, { bucket, key });
    }
  }

  async delete(bucket: string, key: string, opts: { ifMatch?: string } = {}): Promise<void> {
    try {
      await this.s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: key, IfMatch: opts.ifMatch }));
    } catch (err) {
      const { name, status } = storeFailure(err);
      if (opts.ifMatch !== undefined) {
        // S3: a conditional write of the key under way at once; either way the object is not the one named.
        if (name === 'ConditionalRequestConflict')
          throw storageErrors.preconditionFailed('the object is being replaced');
        // A store without conditional deletes: the caller checked the ETag just before (domain/objects.ts).
        if (name === 'NotImplemented' || status === 501) return this.delete(bucket, key);
      }
      throw mapStoreError(err, { bucket, key });
    }
  }

  async bucketMustExist(bucket: string): Promise<void> {
    try {
      await this.s3.send(new HeadBucketCommand({ Bucket: bucket }));
    } catch (err) {
      throw mapStoreError(err, { bucket });
    }
  }

  async listPage(req: StorePageRequest): Promise<StorePage> {
    try {
      const out = await this.s3.send(
        new ListObjectsV2Command({
          Bucket: req.bucket,
          Prefix: req.prefix || undefined,
          Delimiter: req.oneLevel ? '/' : undefined,
          ContinuationToken: req.token,
          StartAfter: req.token ? undefined : req.startAfter,
          MaxKeys: req.maxKeys,
        }),
      );
      return {
        folders: (out.CommonPrefixes ?? []).flatMap((p) => (p.Prefix ? [p.Prefix] : [])),
        objects: (out.Contents ?? []).map((o) => ({
          key: o.Key ?? '',
          size: o.Size ?? 0,
          lastModified: o.LastModified,
          etag: o.ETag,
          isPrefix: false,
        })),
        nextToken: out.IsTruncated ? out.NextContinuationToken : undefined,
      };
    } catch (err) {
      throw mapStoreError(err, { bucket: req.bucket });
    }
  }

  async presign(bucket: string, key: string, method: 'GET' | 'PUT', expiresIn: number): Promise<string> {
    const command =
      method === 'GET'
        ? new GetObjectCommand({ Bucket: bucket, Key: key })
        : new PutObjectCommand({ Bucket: bucket, Key: key });
    return getSignedUrl(this.signer, command, { expiresIn });
  }

  async createMultipart(bucket: string, key: string, contentType: string): Promise<string> {
    try {
      const out = await this.s3.send(
        new CreateMultipartUploadCommand({ Bucket: bucket, Key: key, ContentType: contentType }),
      );
      if (!out.UploadId) throw new Error('the store answered no upload ID');
      return out.UploadId;
    } catch (err) {
      throw mapStoreError(err, { bucket, key });
    }
  }

  async uploadPart(part: PartRequest): Promise<string> {
    const { bucket, key } = part;
    try {
      const out = await this.s3.send(
        new UploadPartCommand({
          Bucket: bucket,
          Key: key,
          UploadId: part.uploadId,
          PartNumber: part.partNumber,
          Body: part.body,
          ContentLength: part.length,
        }),
        { abortSignal: untilBodyFails(part.body, part.signal) },
      );
      if (!out.ETag) throw new Error('the store answered no ETag for the part');
      return out.ETag;
    } catch (err) {
      throw mapStoreError(err, { bucket, key, upload: true });
    }
  }

  async copyPart(part: PartCopyRequest): Promise<string> {
    const { bucket, key } = part;
    try {
      const out = await this.copier.send(
        new UploadPartCopyCommand({
          Bucket: bucket,
          Key: key,
          UploadId: part.uploadId,
          PartNumber: part.partNumber,
          CopySource: copySourceOf(part.source),
          CopySourceIfMatch: part.etag,
          // An empty source has no byte to name: copied whole.
          CopySourceRange: part.last >= part.first ? `bytes=${part.first}-${part.last}` : undefined,
        }),
        { abortSignal: part.signal },
      );
      const etag = out.CopyPartResult?.ETag;
      if (!etag) throw new Error('the store answered no ETag for the part');
      return etag;
    } catch (err) {
      throw mapCopyError(err, part.source, { bucket, key, upload: true });
    }
  }

  async listParts(bucket: string, key: string, uploadId: string): Promise<PartInfo[]> {
    const parts: PartInfo[] = [];
    try {
      let marker: string | undefined;
      do {
        const out = await this.s3.send(
          new ListPartsCommand({ Bucket: bucket, Key: key, UploadId: uploadId, PartNumberMarker: marker }),
        );
        for (const p of out.Parts ?? []) {
          if (p.PartNumber === undefined || !p.ETag) continue;
          parts.push({ partNumber: p.PartNumber, etag: p.ETag, size: p.Size ?? 0, lastModified: p.LastModified });
        }
        marker = out.IsTruncated ? out.NextPartNumberMarker : undefined;
      } while (marker);
    } catch (err) {
      throw mapStoreError(err, { bucket, key, upload: true });
    }
    return parts.sort((a, b) => a.partNumber - b.partNumber);
  }

  async completeMultipart(bucket: string, key: string, uploadId: string, parts: StoredPart[]): Promise<void> {
    try {
      await this.s3.send(
        new CompleteMultipartUploadCommand({
          Bucket: bucket,
          Key: key,
          UploadId: uploadId,
          MultipartUpload: { Parts: parts.map((p) => ({ PartNumber: p.partNumber, ETag: p.etag })) },
        }),
      );
    } catch (err) {
      throw mapStoreError(err, { bucket, key, upload: true });
    }
  }

  async abortMultipart(bucket: string, key: string, uploadId: string): Promise<void> {
    try {
      await this.s3.send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: key, UploadId: uploadId }));
    } catch (err) {
      const mapped = mapStoreError(err, { bucket, key, upload: true });
      if ((mapped as { code?: string }).code === 'UPLOAD_NOT_FOUND') return;
      throw mapped;
    }
  }

  close(): void {
    this.s3.destroy();
    this.copier.destroy();
    if (this.signer !== this.s3) this.signer.destroy();
  }
}
