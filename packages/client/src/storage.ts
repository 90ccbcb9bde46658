/**
 * Objects through the storage service, typed from its document: uploads from a `Blob`, bytes, text or a stream
 * (streamed: sent once, never held whole), downloads as a stream (with `Range`, `If-None-Match`, or by redirect to the
 * store), copies made by the store, listings page by page or all at once, presigned URLs. Every call is an operation of the storage document
 * (`/objects/{bucketName}/{objectKey}` and its default-bucket twin `/objects/{objectKey}`), sent by the typed client:
 * an object key's slashes go encoded (`a%2Fb.bin`), which the service reads as the same key.
 *
 *   const objects = objectStore({ baseUrl: 'http://127.0.0.1:8001', token });
 *   await objects.upload({ bucket: 'datasets', key: 'train/part-0.parquet' }, createReadStream(file));
 *   const { body } = await objects.download({ bucket: 'datasets', key: 'train/part-0.parquet' });
 */
import { Readable } from 'node:stream';
import createClient, { type Client } from 'openapi-fetch';
import { type ClientOptions, clientFetch } from './client-options.ts';
import { ApiError, type Problem, unwrap } from './errors.ts';
import type { components, paths as StoragePaths } from './generated/storage.ts';
import { endlessListGuard } from './paging.ts';

type Schemas = components['schemas'];
export type ObjectInfo = Schemas['ObjectInfo'];
export type PresignedUrl = Schemas['PresignedUrl'];
export type BucketEnsured = Schemas['BucketEnsured'];
export type Upload = Schemas['Upload'];
export type UploadSummary = Schemas['UploadSummary'];
export type UploadPart = Schemas['UploadPart'];

/** An object: its key in `bucket`, or in the service's default bucket (in the caller's folder) without one. */
export interface ObjectRef {
  bucket?: string;
  key: string;
}

/** What an upload may send: bytes in memory, text, a `Blob`, or a stream (web or Node) read once. */
export type ObjectBody = Blob | Uint8Array | ArrayBuffer | string | ReadableStream<Uint8Array> | Readable;

export interface UploadOptions {
  /** The object's content type (else the service guesses it from the key's extension). */
  contentType?: string;
  /** The body's length in bytes, when a stream's is known (sent as `Content-Length`; else the body goes chunked). */
  contentLength?: number;
  /**
   * Aborts the upload. An upload has no time limit of its own (the client's `timeoutMs` would cut a large body off
   * mid-way: the service answers only once all of it is stored), so a caller who needs one passes
   * `AbortSignal.timeout(ms)`.
   */
  signal?: AbortSignal;
}

export interface DownloadOptions {
  /** A byte range: `{ start, end }` (inclusive, end optional) or an HTTP `Range` value (`bytes=0-99`). */
  range?: { start: number; end?: number } | string;
  /** Answer 304 (`notModified`) when the object still has this ETag. */
  ifNoneMatch?: string;
  /** Have the service answer with a presigned URL of the object at the store and fetch the bytes from there. */
  redirect?: boolean;
  signal?: AbortSignal;
}

/** An object's headers. */
export interface ObjectHead {
  contentType: string | null;
  contentLength: number | null;
  etag: string | null;
  lastModified: Date | null;
}

export interface Download extends ObjectHead {
  /** 200 (all), 206 (the range) or 304 (not modified: no body). */
  status: number;
  notModified: boolean;
  /** The bytes (empty when not modified); read it, or cancel it, to free the connection. */
  body: ReadableStream<Uint8Array>;
  contentRange: string | null;
  /** The whole body in memory, for a small object. */
  bytes(): Promise<Uint8Array>;
  text(): Promise<string>;
}

export interface ListOptions {
  prefix?: string;
  /** false: one level, folders as entries with `is_prefix` (default true). */
  recursive?: boolean;
  /** Entries per page (the service's bounds apply). */
  limit?: number;
  cursor?: string;
  /** false: skip each object's content type (faster, `content_type: null`). */
  metadata?: boolean;
}

export interface ListPage {
  objects: ObjectInfo[];
  /** The next page's cursor; null on the last page. */
  nextCursor: string | null;
}

/**
 * Resumable uploads: an object sent as numbered parts (at least `min_part_size` each but the last), which survive a
 * failure: `get` says which parts arrived, the rest are sent again, `complete` joins them.
 */
export interface Uploads {
  start(ref: ObjectRef, opts?: { contentType?: string }): Promise<Upload>;
  get(uploadId: string): Promise<Upload>;
  /** Your unfinished uploads, oldest first. */
  list(): Promise<UploadSummary[]>;
  /** Sends one part (`contentLength` bytes of `body`); a part of that number sent before is replaced. */
  putPart(
    uploadId: string,
    partNumber: number,
    body: ObjectBody,
    opts: { contentLength: number; signal?: AbortSignal },
  ): Promise<UploadPart>;
  /**
   * Has the store copy one part from bytes `start` to `end` (inclusive, as a download's range) of an object, or all
   * of it: of the version `sourceEtag` names (its ETag as read; another there is 409 SOURCE_CHANGED). No time limit
   * of its own; pass `signal` for one.
   */
  copyPart(
    uploadId: string,
    partNumber: number,
    source: ObjectRef,
    opts: { sourceEtag: string; range?: { start: number; end: number }; signal?: AbortSignal },
  ): Promise<UploadPart>;
  /** Joins the parts named (each with the ETag it was answered), or every part stored, into the object. */
  complete(uploadId: string, parts?: Array<{ part_number: number; etag: string }>): Promise<ObjectInfo>;
  abort(uploadId: string): Promise<void>;
}

export interface ObjectStore {
  /** Resumable uploads (`/uploads`). */
  uploads: Uploads;
  /** The typed client itself, for any operation of the storage document. */
  api: Client<StoragePaths>;
  ensureBucket(bucket: string): Promise<BucketEnsured>;
  upload(ref: ObjectRef, body: ObjectBody, opts?: UploadOptions): Promise<ObjectInfo>;
  download(ref: ObjectRef, opts?: DownloadOptions): Promise<Download>;
  head(ref: ObjectRef): Promise<ObjectHead>;
  /** Deletes the object; with `ifMatch` (an ETag as read), only while it is that object (else 412 OBJECT_CHANGED). */
  remove(ref: ObjectRef, opts?: { ifMatch?: string }): Promise<void>;
  /**
   * Has the store copy `from` to `to` (no byte through the service or here): the copy's ObjectInfo. No time limit of
   * its own (a large copy takes the store a while); pass `signal` for one.
   */
  copy(from: ObjectRef, to: ObjectRef, opts?: { signal?: AbortSignal }): Promise<ObjectInfo>;
  list(bucket: string | undefined, opts?: ListOptions): Promise<ListPage>;
  /** Every entry of a listing, page after page. */
  listAll(bucket: string | undefined, opts?: Omit<ListOptions, 'cursor'>): AsyncIterable<ObjectInfo>;
  presign(ref: ObjectRef, opts: { method: 'GET' | 'PUT'; expiry?: string }): Promise<PresignedUrl>;
}

/** A stream read once, as the web stream fetch sends, or the body as it is. */
type SendBody = NonNullable<RequestInit['body']>;

function sendable(body: ObjectBody): { body: SendBody; once: boolean } {
  if (body instanceof Readable) return { body: Readable.toWeb(body) as ReadableStream<Uint8Array>, once: true };
  if (body instanceof ReadableStream) return { body, once: true };
  if (body instanceof ArrayBuffer) return { body: new Uint8Array(body), once: false };
  if (typeof body === 'string') return { body: new TextEncoder().encode(body), once: false };
  return { body: body as SendBody, once: false };
}

/** A problem answer (HEAD and 304 have no body: the status alone). */
function refused(response: Response, error: unknown): ApiError {
  const problem = (
    error && typeof error === 'object' ? error : { detail: String(error ?? response.statusText) }
  ) as Problem;
  return new ApiError(response.status, problem);
}

function headOf(headers: Headers): ObjectHead {
  const length = headers.get('content-length');
  const modified = headers.get('last-modified');
  return {
    contentType: headers.get('content-type'),
    contentLength: length === null ? null : Number(length),
    etag: headers.get('etag'),
    lastModified: modified ? new Date(modified) : null,
  };
}

const rangeHeader = (range: DownloadOptions['range']) =>
  typeof range === 'string' ? range : range ? `bytes=${range.start}-${range.end ?? ''}` : undefined;

/** The storage service's objects, for a caller with these options (`baseUrl` is the storage service's). */
export function objectStore(opts: ClientOptions): ObjectStore {
  const baseUrl = opts.baseUrl.replace(/\/$/, '');
  const api = createClient<StoragePaths>({ baseUrl, fetch: clientFetch(opts) });
  // Downloads stream the object, whatever its type (one stored as JSON too): the time limit is the headers'.
  const downloads = createClient<StoragePaths>({ baseUrl, fetch: clientFetch(opts, true, false) });
  // Uploads: no limit per attempt (the answer comes after the whole body); a stream goes out once.
  const untimed = { ...opts, timeoutMs: 0 };
  const upload = clientFetch(untimed);
  const once = clientFetch(untimed, false);

  /** fetch's options for sending a body as raw bytes (a stream once, never copied for a retry). */
  const rawBody = (body: ObjectBody, headers: Record<string, string | null>, signal?: AbortSignal) => {
    const sent = sendable(body);
    return {
      body: sent.body as unknown as Blob,
      bodySerializer: (b: unknown) => b as SendBody,
      headers,
      signal,
      // fetch needs `duplex: 'half'` to send a stream.
      ...(sent.once ? { fetch: once, duplex: 'half' as const } : { fetch: upload }),
    };
  };

  const uploads: Uploads = {
    async start(ref, startOpts = {}) {
      const body = {
        ...(ref.bucket ? { bucket: ref.bucket } : {}),
        key: ref.key,
        ...(startOpts.contentType ? { content_type: startOpts.contentType } : {}),
      };
      return unwrap(await api.POST('/uploads', { body }));
    },
    async get(uploadId) {
      return unwrap(await api.GET('/uploads/{uploadId}', { params: { path: { uploadId } } }));
    },
    async list() {
      return unwrap(await api.GET('/uploads'));
    },
    async putPart(uploadId, partNumber, body, partOpts) {
      const headers = { 'content-type': 'application/octet-stream', 'content-length': String(partOpts.contentLength) };
      return unwrap(
        await api.PUT('/uploads/{uploadId}/parts/{partNumber}', {
          ...rawBody(body, headers, partOpts.signal),
          params: { path: { uploadId, partNumber } },
        }),
      );
    },
    async copyPart(uploadId, partNumber, source, copyOpts) {
      const { range, sourceEtag } = copyOpts;
      return unwrap(
        await api.POST('/uploads/{uploadId}/parts/{partNumber}/copy', {
          params: { path: { uploadId, partNumber } },
          body: {
            source: { ...(source.bucket ? { bucket: source.bucket } : {}), key: source.key },
            ...(range ? { range: `bytes=${range.start}-${range.end}` } : {}),
            source_etag: sourceEtag,
          },
          // A part copies at the store's pace: no attempt's time limit (a part copied again replaces itself).
          fetch: upload,
          signal: copyOpts.signal,
        }),
      );
    },
    async complete(uploadId, parts) {
      return unwrap(
        await api.POST('/uploads/{uploadId}/complete', {
          params: { path: { uploadId } },
          body: parts ? { parts } : {},
        }),
      );
    },
    async abort(uploadId) {
      const result = await api.DELETE('/uploads/{uploadId}', { params: { path: { uploadId } } });
      if (!result.response.ok) throw refused(result.response, result.error);
    },
  };

  const store: ObjectStore = {
    api,
    uploads,

    async ensureBucket(bucket) {
      return unwrap(await api.POST('/buckets/{bucketName}', { params: { path: { bucketName: bucket } } }));
    },

    async upload(ref, body, uploadOpts = {}) {
      // Without a content type the service guesses one from the key (fetch would otherwise send its own: JSON from
      // the typed client, text/plain for a string, which `sendable` sends as bytes for that reason).
      const headers: Record<string, string | null> = {
        'content-type': uploadOpts.contentType ?? null,
        ...(uploadOpts.contentLength !== undefined ? { 'content-length': String(uploadOpts.contentLength) } : {}),
      };
      const init = rawBody(body, headers, uploadOpts.signal);
      const result = ref.bucket
        ? await api.PUT('/objects/{bucketName}/{objectKey}', {
            ...init,
            params: { path: { bucketName: ref.bucket, objectKey: ref.key } },
          })
        : await api.PUT('/objects/{objectKey}', { ...init, params: { path: { objectKey: ref.key } } });
      return unwrap(result);
    },

    async download(ref, downloadOpts = {}) {
      const headers: Record<string, string> = {};
      const range = rangeHeader(downloadOpts.range);
      if (range) headers.range = range;
      if (downloadOpts.ifNoneMatch) headers['if-none-match'] = downloadOpts.ifNoneMatch;
      const query = downloadOpts.redirect ? { redirect: true } : {};
      const init = { headers, parseAs: 'stream' as const, signal: downloadOpts.signal };
      const result = ref.bucket
        ? await downloads.GET('/objects/{bucketName}/{objectKey}', {
            ...init,
            params: { path: { bucketName: ref.bucket, objectKey: ref.key }, query },
          })
        : await downloads.GET('/objects/{objectKey}', { ...init, params: { path: { objectKey: ref.key }, query } });
      const { response } = result;
      if (!response.ok && response.status !== 304) throw refused(response, result.error);
      const body = (result.data as ReadableStream<Uint8Array> | undefined) ?? new Blob([]).stream();
      const read = async () => new Uint8Array(await new Response(body).arrayBuffer());
      return {
        ...headOf(response.headers),
        status: response.status,
        notModified: response.status === 304,
        body,
        contentRange: response.headers.get('content-range'),
        bytes: read,
        text: async () => new TextDecoder().decode(await read()),
      };
    },

    async head(ref) {
      const result = ref.bucket
        ? await api.HEAD('/objects/{bucketName}/{objectKey}', {
            params: { path: { bucketName: ref.bucket, objectKey: ref.key } },
          })
        : await api.HEAD('/objects/{objectKey}', { params: { path: { objectKey: ref.key } } });
      if (!result.response.ok) throw refused(result.response, { status: result.response.status });
      return headOf(result.response.headers);
    },

    async remove(ref, removeOpts = {}) {
      const header = removeOpts.ifMatch === undefined ? {} : { 'if-match': removeOpts.ifMatch };
      const result = ref.bucket
        ? await api.DELETE('/objects/{bucketName}/{objectKey}', {
            params: { path: { bucketName: ref.bucket, objectKey: ref.key }, header },
          })
        : await api.DELETE('/objects/{objectKey}', { params: { path: { objectKey: ref.key }, header } });
      if (!result.response.ok) throw refused(result.response, result.error);
    },

    async copy(from, to, copyOpts = {}) {
      const end = (ref: ObjectRef) => ({ ...(ref.bucket ? { bucket: ref.bucket } : {}), key: ref.key });
      return unwrap(
        await api.POST('/objects/copy', {
          body: { source: end(from), destination: end(to) },
          fetch: upload,
          signal: copyOpts.signal,
        }),
      );
    },

    async list(bucket, listOpts = {}) {
      const query = { ...listOpts };
      const result = bucket
        ? await api.GET('/objects/{bucketName}/list', { params: { path: { bucketName: bucket }, query } })
        : await api.GET('/objects/list', { params: { query } });
      return { objects: unwrap(result), nextCursor: result.response.headers.get('x-next-cursor') };
    },

    async *listAll(bucket, listOpts = {}) {
      const guard = endlessListGuard();
      let cursor: string | undefined;
      do {
        const page = await store.list(bucket, { ...listOpts, ...(cursor ? { cursor } : {}) });
        yield* page.objects;
        cursor = page.nextCursor ?? undefined;
        if (cursor !== undefined) guard(cursor);
      } while (cursor);
    },

    async presign(ref, presignOpts) {
      const body = { method: presignOpts.method, ...(presignOpts.expiry ? { expiry: presignOpts.expiry } : {}) };
      const result = ref.bucket
        ? await api.POST('/presigned-url/{bucketName}/{objectKey}', {
            params: { path: { bucketName: ref.bucket, objectKey: ref.key } },
            body,
          })
        : await api.POST('/presigned-url/{objectKey}', { params: { path: { objectKey: ref.key } }, body });
      return unwrap(result);
    },
  };
  return store;
}
