/**
 * The object store as the domain sees it: the narrow interface the rules
 * call, implemented over S3 by `adapters/object-store.ts`. Failures arrive as
 * the service's errors (`errors.ts`) or `NotModified`.
 */
import type { Readable } from 'node:stream';

/** An object, or a common prefix ("folder") of a one-level listing. */
export interface ObjectEntry {
  key: string;
  size: number;
  lastModified?: Date;
  /** Known after an upload or a HEAD; not in a store listing. */
  contentType?: string;
  etag?: string;
  /** A common prefix of a one-level listing (`data/`). */
  isPrefix: boolean;
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

/** A read's conditions, as the store takes them (see `read-rules.ts` for which ones are passed on). */
export interface ReadConditions {
  range?: string;
  ifNoneMatch?: string;
  ifModifiedSince?: Date;
}

/** A conditional read whose condition says "not modified", with the validators the store sent (if any). */
export class NotModified extends Error {
  constructor(
    readonly etag?: string,
    readonly lastModified?: string,
  ) {
    super('not modified');
  }
}

export interface UploadRequest {
  bucket: string;
  key: string;
  /**
   * The bytes: a stream (a request's body), sent once, or a small record held whole, which the store's client may
   * send again after a failure that may pass, and whose refusals (a missing bucket, a key already there) are the
   * caller's to judge, quietly.
   */
  body: Readable | Buffer;
  contentType: string;
  /** Known length (Content-Length) or undefined for a chunked body. */
  contentLength?: number;
  /** `*`: write only when no object has the key (a conditional write; bodies up to one part only). */
  ifNoneMatch?: '*';
  signal?: AbortSignal;
}

/** An object copied by the store itself to another key (of the same bucket or another). */
export interface CopyRequest {
  source: { bucket: string; key: string };
  destination: { bucket: string; key: string };
  /**
   * When the copy is given up at the latest (the request's time limit): a copy the store makes after its request
   * failed (the caller gone, a time limit) is found by reconciliation, which looks at the key until then.
   */
  until: Date;
  signal?: AbortSignal;
}

/** One part of a multipart upload that the store copies from a byte range of an object (S3's UploadPartCopy). */
export interface PartCopyRequest {
  bucket: string;
  key: string;
  uploadId: string;
  partNumber: number;
  source: { bucket: string; key: string };
  /** The source's version the part is of: another there is SOURCE_CHANGED. */
  etag: string;
  /** The first and last byte of the source copied (inclusive, as HTTP's Range); 0 and -1: an empty source, whole. */
  first: number;
  last: number;
  signal?: AbortSignal;
}

/** One part of a multipart upload on its way to the store. */
export interface PartRequest {
  bucket: string;
  key: string;
  uploadId: string;
  partNumber: number;
  body: Readable;
  length: number;
  signal?: AbortSignal;
}

/** A part the store holds: its number and the ETag the store gave it. */
export interface StoredPart {
  partNumber: number;
  etag: string;
}

/** A part as the store lists it. */
export interface PartInfo extends StoredPart {
  size: number;
  lastModified?: Date;
}

/** One request for a page of the store's own listing. */
export interface StorePageRequest {
  bucket: string;
  prefix: string;
  /** One level: keys below a `/` after the prefix come back as their folder. */
  oneLevel: boolean;
  /** Where the listing starts (ignored when `token` continues one). */
  startAfter?: string;
  /** The store's continuation token of the previous page. */
  token?: string;
  maxKeys: number;
}

/** One page of the store's listing: folders and objects, and the token of the next page when there is one. */
export interface StorePage {
  folders: string[];
  objects: ObjectEntry[];
  nextToken?: string;
}

/** The operations the domain and routes need; tests and other stores can implement it. */
export interface ObjectStore {
  ping(): Promise<void>;
  ensureBucket(bucket: string): Promise<'created' | 'exists'>;
  /** Throws BUCKET_NOT_FOUND when the bucket does not exist. */
  bucketMustExist(bucket: string): Promise<void>;
  /**
   * Stores the body (streamed; multipart where large). Answers the stored object's head where the store read it back
   * anyway (the catalogued store does, to catalogue it), else undefined: the caller HEADs it if it needs it.
   */
  upload(req: UploadRequest): Promise<ObjectHead | undefined>;
  /**
   * Copies the source's bytes and content type to the destination at the store (no byte passes through the service),
   * the version the copy began with (a source changed meanwhile is SOURCE_CHANGED). A missing source is
   * OBJECT_NOT_FOUND (or BUCKET_NOT_FOUND) of the source, a missing destination bucket BUCKET_NOT_FOUND. Answers as
   * `upload` does.
   */
  copy(req: CopyRequest): Promise<ObjectHead | undefined>;
  get(bucket: string, key: string, cond: ReadConditions, signal?: AbortSignal): Promise<ObjectBody>;
  head(bucket: string, key: string, cond: ReadConditions): Promise<ObjectHead>;
  /**
   * Deletes the key; the store answers alike whether it existed or not. With `ifMatch` (an ETag, or `*`), only the
   * object of that ETag: another there is PRECONDITION_FAILED, none OBJECT_NOT_FOUND, at stores with conditional
   * deletes (S3, the dev server); a store without them deletes whatever is there (the caller checks before).
   */
  delete(bucket: string, key: string, opts?: { ifMatch?: string }): Promise<void>;
  listPage(req: StorePageRequest): Promise<StorePage>;
  /**
   * A presigned URL of the key. `owner`: the user a write URL is handed to and the most keys with write URLs open
   * they may have (the catalog counts them: 409 TOO_MANY_WRITE_URLS past it); a store alone takes no notice of it.
   */
  presign(
    bucket: string,
    key: string,
    method: 'GET' | 'PUT',
    expiresInSeconds: number,
    owner?: { id: string; max: number },
  ): Promise<string>;
  /** Starts a multipart upload at the store; its upload ID. */
  createMultipart(bucket: string, key: string, contentType: string): Promise<string>;
  /** Sends one part of exactly `length` bytes (streamed); its ETag. NoSuchUpload is UPLOAD_NOT_FOUND. */
  uploadPart(part: PartRequest): Promise<string>;
  /** Has the store copy one part from a source's byte range; its ETag. NoSuchUpload is UPLOAD_NOT_FOUND. */
  copyPart(part: PartCopyRequest): Promise<string>;
  /** The parts the store holds of an upload, by number. NoSuchUpload is UPLOAD_NOT_FOUND. */
  listParts(bucket: string, key: string, uploadId: string): Promise<PartInfo[]>;
  /** Joins the parts, in the order given, into the object. */
  completeMultipart(bucket: string, key: string, uploadId: string, parts: StoredPart[]): Promise<void>;
  /** Gives the upload up and frees its parts; an upload the store no longer knows is not an error. */
  abortMultipart(bucket: string, key: string, uploadId: string): Promise<void>;
  close(): void;
}

/**
 * Writes `value` as a small JSON object at `key` only when no object has the key (`If-None-Match: *`: atomic on S3,
 * MinIO and other stores with conditional writes), making the bucket on first use; a write that finds one there
 * (412) leaves it. Read the key back to know which write holds.
 */
export async function writeJsonOnce(store: ObjectStore, bucket: string, key: string, value: unknown): Promise<void> {
  const body = Buffer.from(JSON.stringify(value));
  const write = () =>
    store.upload({
      bucket,
      key,
      body,
      contentType: 'application/json',
      contentLength: body.length,
      ifNoneMatch: '*',
    });
  try {
    await write().catch(async (err) => {
      if ((err as { code?: string }).code !== 'BUCKET_NOT_FOUND') throw err;
      await store.ensureBucket(bucket);
      await write();
    });
  } catch (err) {
    if ((err as { code?: string }).code !== 'PRECONDITION_FAILED') throw err;
  }
}

/** The JSON object at `key`, or undefined when there is none (nor its bucket). */
export async function readJson(store: ObjectStore, bucket: string, key: string): Promise<unknown> {
  try {
    const object = await store.get(bucket, key, {});
    const chunks: Buffer[] = [];
    for await (const chunk of object.body) chunks.push(chunk as Buffer);
    return JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown;
  } catch (err) {
    const code = (err as { code?: string }).code;
    if (code === 'OBJECT_NOT_FOUND' || code === 'BUCKET_NOT_FOUND') return undefined;
    throw err;
  }
}
