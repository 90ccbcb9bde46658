/**
 * The object store behind a small interface, over @aws-sdk/client-s3.
 * Checksums are computed only when an operation requires them: right for
 * s3rver, older MinIO and most S3-compatible stores (see ENVIRONMENT.md).
 */

import type { Readable } from 'node:stream';
import {
  CreateBucketCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  ListBucketsCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import { AppError, type Logger } from '@gpu/common';
import type { StorageConfig } from '../config.ts';
import { bufferedMultipartUpload, streamingMultipartUpload } from './multipart.ts';
import { ReadBufferAgent } from './read-buffer-agent.ts';
import { mapStoreError, NotModified } from './store-errors.ts';

export { NotModified };

/** ObjectInfo as the API returns it. */
export interface ObjectInfo {
  key: string;
  size: number;
  last_modified: string | null;
  content_type: string | null;
  etag: string | null;
  /** True for a common prefix ("folder") in a non-recursive listing. */
  is_prefix: boolean;
}

export interface ObjectHead {
  contentType: string;
  contentLength: number;
  etag: string | undefined;
  lastModified: Date | undefined;
  contentRange?: string;
}

export interface ObjectBody extends ObjectHead {
  body: Readable;
  partial: boolean;
}

export interface ReadConditions {
  range?: string;
  ifNoneMatch?: string;
  ifModifiedSince?: Date;
}

export interface UploadRequest {
  bucket: string;
  key: string;
  body: Readable;
  contentType: string;
  /** Known length (Content-Length) or undefined for a chunked body. */
  contentLength?: number;
  signal?: AbortSignal;
}

export interface ListRequest {
  bucket: string;
  prefix: string;
  recursive: boolean;
  limit?: number;
  startAfter?: string;
}

/** The operations the routes need; tests and other stores can implement it. */
export interface ObjectStore {
  ping(): Promise<void>;
  ensureBucket(bucket: string): Promise<'created' | 'exists'>;
  upload(req: UploadRequest): Promise<ObjectInfo>;
  get(bucket: string, key: string, cond: ReadConditions, signal?: AbortSignal): Promise<ObjectBody>;
  head(bucket: string, key: string, cond: ReadConditions): Promise<ObjectHead>;
  delete(bucket: string, key: string): Promise<void>;
  list(req: ListRequest): Promise<{ entries: ObjectInfo[]; truncated: boolean }>;
  presign(bucket: string, key: string, method: 'GET' | 'PUT', expiresInSeconds: number): Promise<string>;
  waitUntilReachable(timeoutMs: number, log: Logger): Promise<void>;
  close(): void;
}

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

function endpointUrl(endpoint: string, useSSL: boolean): string {
  return /^https?:\/\//.test(endpoint) ? endpoint : `${useSSL ? 'https' : 'http'}://${endpoint}`;
}

function client(settings: StoreSettings, endpoint: string): S3Client {
  const url = endpointUrl(endpoint, settings.useSSL);
  const s3 = new S3Client({
    // Plain-http stores get sockets that read into one reused buffer (read-buffer-agent.ts), pooled as the SDK's
    // own agent pools them (keep-alive, 50 sockets); https keeps the SDK's agent.
    ...(url.startsWith('http:')
      ? { requestHandler: { httpAgent: new ReadBufferAgent(STORE_READ_SIZE, { keepAlive: true, maxSockets: 50 }) } }
      : {}),
    endpoint: url,
    region: settings.region || 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: settings.accessKeyID, secretAccessKey: settings.secretAccessKey },
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
  });
  signUploadsUnsigned(s3);
  return s3;
}

/**
 * U+10FFFF, the largest code point, whose UTF-8 (F4 8F BF BF) sorts after every other character's: a folder name
 * followed by it sorts after the folder's keys (all but ones continuing with that very character, which the listing
 * still leaves out below).
 */
const PAST_EVERY_KEY = '\u{10FFFF}';

/**
 * In a one-level listing, the folder (common prefix) that `startAfter` lies in, or is, when there is one: `data/`
 * for `data/` or `data/one.csv` under prefix `''`. The folder was one entry of an earlier page, so every key in it
 * sorts, as an entry, at or before `startAfter`: the next page starts after the whole folder. (Passing `data/` to
 * the store as StartAfter unchanged would bring the folder back for ever: `data/one.csv` sorts after it.)
 */
export function folderOf(prefix: string, startAfter: string | undefined): string | undefined {
  if (startAfter === undefined || !startAfter.startsWith(prefix)) return undefined;
  const slash = startAfter.indexOf('/', prefix.length);
  return slash === -1 ? undefined : startAfter.slice(0, slash + 1);
}

export class S3ObjectStore implements ObjectStore {
  private readonly s3: S3Client;
  private readonly signer: S3Client;

  constructor(private readonly settings: StoreSettings) {
    this.s3 = client(settings, settings.endpoint);
    this.signer = settings.publicEndpoint ? client(settings, settings.publicEndpoint) : this.s3;
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

  async upload(req: UploadRequest): Promise<ObjectInfo> {
    const { bucket, key } = req;
    try {
      const { contentLength } = req;
      if (contentLength !== undefined && contentLength <= this.settings.partSize) {
        // Small bodies of known length stream straight through in one PUT.
        await this.s3.send(
          new PutObjectCommand({
            Bucket: bucket,
            Key: key,
            Body: req.body,
            ContentType: req.contentType,
            ContentLength: contentLength,
          }),
          { abortSignal: req.signal },
        );
      } else if (contentLength !== undefined) {
        // Known length: every part streams through, nothing is buffered.
        await streamingMultipartUpload(this.s3, { ...req, contentLength, partSize: this.settings.partSize });
      } else {
        // Chunked body of unknown length: parts gathered in queueSize reused buffers of partSize.
        await bufferedMultipartUpload(this.s3, {
          ...req,
          partSize: this.settings.partSize,
          queueSize: this.settings.queueSize,
        });
      }
    } catch (err) {
      throw mapStoreError(err, { bucket, key });
    }
    const head = await this.head(bucket, key, {});
    return {
      key,
      size: head.contentLength,
      last_modified: head.lastModified?.toISOString() ?? null,
      content_type: head.contentType,
      etag: head.etag ?? null,
      is_prefix: false,
    };
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

  async delete(bucket: string, key: string): Promise<void> {
    // S3 answers 204 for a missing key; the API promises a 404, so look first.
    try {
      await this.head(bucket, key, {});
    } catch (err) {
      // A HEAD's 404 has no body to tell a missing key from a missing bucket: ask about the bucket then, so DELETE
      // answers BUCKET_NOT_FOUND like GET, PUT and list.
      if (err instanceof AppError && err.code === 'OBJECT_NOT_FOUND') await this.bucketMustExist(bucket);
      throw err;
    }
    try {
      await this.s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: key }));
    } catch (err) {
      throw mapStoreError(err, { bucket, key });
    }
  }

  /** Throws BUCKET_NOT_FOUND when the bucket does not exist. */
  private async bucketMustExist(bucket: string): Promise<void> {
    try {
      await this.s3.send(new HeadBucketCommand({ Bucket: bucket }));
    } catch (err) {
      throw mapStoreError(err, { bucket });
    }
  }

  async list(req: ListRequest): Promise<{ entries: ObjectInfo[]; truncated: boolean }> {
    const entries: ObjectInfo[] = [];
    let token: string | undefined;
    const limit = req.limit ?? Number.POSITIVE_INFINITY;
    const folder = req.recursive ? undefined : folderOf(req.prefix, req.startAfter);
    const startAfter = folder === undefined ? req.startAfter : `${folder}${PAST_EVERY_KEY}`;
    const folders = new Set<string>();
    try {
      do {
        const out = await this.s3.send(
          new ListObjectsV2Command({
            Bucket: req.bucket,
            Prefix: req.prefix || undefined,
            Delimiter: req.recursive ? undefined : '/',
            ContinuationToken: token,
            StartAfter: token ? undefined : startAfter,
            MaxKeys: Math.min(1000, limit - entries.length),
          }),
        );
        for (const p of out.CommonPrefixes ?? []) {
          // The folder that start_after lies in was listed already (as one entry), whatever keys follow in it; and
          // a store that repeats a folder on a later page of its own (s3rver) does not list it twice.
          if (p.Prefix && p.Prefix !== folder && !folders.has(p.Prefix)) {
            folders.add(p.Prefix);
            entries.push({
              key: p.Prefix,
              size: 0,
              last_modified: null,
              content_type: null,
              etag: null,
              is_prefix: true,
            });
          }
        }
        for (const o of out.Contents ?? []) {
          entries.push({
            key: o.Key ?? '',
            size: o.Size ?? 0,
            last_modified: o.LastModified?.toISOString() ?? null,
            content_type: null,
            etag: o.ETag ?? null,
            is_prefix: false,
          });
        }
        token = out.IsTruncated ? out.NextContinuationToken : undefined;
      } while (token && entries.length < limit);
    } catch (err) {
      throw mapStoreError(err, { bucket: req.bucket });
    }
    // The store's order (UTF-8 bytes), so that the last entry of a page is where the next one starts.
    // Each key is encoded once, not once per comparison (a listing may hold 100,000 entries).
    const sorted = entries
      .map((entry) => ({ entry, bytes: Buffer.from(entry.key) }))
      .sort((a, b) => Buffer.compare(a.bytes, b.bytes))
      .map(({ entry }) => entry);
    const truncated = token !== undefined || sorted.length > limit;
    return { entries: sorted.slice(0, Number.isFinite(limit) ? limit : undefined), truncated };
  }

  async presign(bucket: string, key: string, method: 'GET' | 'PUT', expiresIn: number): Promise<string> {
    const command =
      method === 'GET'
        ? new GetObjectCommand({ Bucket: bucket, Key: key })
        : new PutObjectCommand({ Bucket: bucket, Key: key });
    return getSignedUrl(this.signer, command, { expiresIn });
  }

  close(): void {
    this.s3.destroy();
    if (this.signer !== this.s3) this.signer.destroy();
  }
}
