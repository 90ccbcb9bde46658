/**
 * Uploads a job's output to storage through a presigned PUT URL. The data owner (the renter) asks the storage service
 * for the URL (`POST /presigned-url/{bucket}/{key}` with `{method: "PUT"}`) and hands it to the job, so the daemon
 * needs no rights over the renter's data: whoever holds the URL may write that one key until it expires.
 *
 * - One streamed PUT: the file is read from disk as it is sent (never held whole), with its `Content-Length`, so the
 *   store's limit of a single PUT applies (5 GiB on S3).
 * - `Expect: 100-continue`: the store may refuse (expired URL, wrong signature) before any byte of the body is sent.
 *   A server that never answers the expectation gets the body after a second, as curl does.
 * - Retries with exponential backoff (`@gpu/common`'s retry helper) on network errors, time-outs, 5xx and 429: a PUT
 *   of the same bytes to the same key is idempotent. Never on another status: a 4xx will not change by asking again
 *   (an expired or wrongly signed URL is 403 `AccessDenied` / `SignatureDoesNotMatch`); the error names the status
 *   and the store's error code and message from its XML body.
 * - The MD5 of the bytes sent is computed while they stream; when the store answers with a plain MD5 ETag (32 hex
 *   digits: S3 and MinIO for a single PUT without SSE-KMS), it must be that MD5.
 * - A time-out on inactivity (`timeoutMs` without a byte going either way), not on the whole transfer, which may
 *   take long for a large file.
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { withRetry } from '@gpu/common/retry';

/** S3's largest single PUT (5 GiB); larger objects need a multipart upload, which a presigned PUT URL is not. */
export const MAX_SINGLE_PUT_BYTES = 5 * 1024 ** 3;
/** How long to wait for `100 Continue` before sending the body anyway. */
const CONTINUE_WAIT_MS = 1000;
/** How much of an error answer is read for its code and message. */
const MAX_ERROR_BODY = 64 * 1024;

export interface UploadOptions {
  /** Attempts in all, the first included (default 5). */
  attempts?: number;
  /** First wait between attempts, doubling up to `maxDelayMs` (defaults 1 s and 30 s; the waits are jittered). */
  baseDelayMs?: number;
  maxDelayMs?: number;
  /** Inactivity limit of one attempt: no byte sent or received for this long (default 60 s). */
  timeoutMs?: number;
  /** Compare a plain-MD5 ETag with the bytes sent (default true; off for stores whose ETags are not MD5s: SSE-KMS). */
  checkEtag?: boolean;
  /** `Content-Type` of the object (default: none, the store's default). */
  contentType?: string;
  /** Told of each failed attempt that will be tried again. */
  onRetry?: (failure: { attempt: number; error: UploadError }) => void;
}

export interface UploadResult {
  /** Bytes sent (the file's size). */
  bytes: number;
  /** Hex MD5 of the bytes sent. */
  md5: string;
  /** The store's ETag, unquoted (null when it sent none). */
  etag: string | null;
  /** Whether the ETag was a plain MD5 and was checked against `md5`. */
  etagChecked: boolean;
  attempts: number;
}

/** A failed upload: `status` and `code` when the store answered, `retryable` whether another attempt may succeed. */
export class UploadError extends Error {
  override name = 'UploadError';
  constructor(
    message: string,
    readonly retryable: boolean,
    readonly status?: number,
    readonly code?: string,
  ) {
    super(message);
  }
}

/** Uploads `file` to the presigned PUT `url`; see the file's comment. Throws `UploadError`. */
export async function uploadFile(file: string, url: string, opts: UploadOptions = {}): Promise<UploadResult> {
  let target: URL;
  try {
    target = new URL(url);
  } catch {
    throw new UploadError('not a URL: pass the presigned PUT URL the storage service handed out', false);
  }
  if (target.protocol !== 'http:' && target.protocol !== 'https:') {
    throw new UploadError(`not an http(s) URL: ${target.protocol}`, false);
  }
  const info = await stat(file).catch((err: NodeJS.ErrnoException) => {
    throw new UploadError(`cannot read ${file}: ${err.code ?? err.message}`, false);
  });
  if (!info.isFile()) throw new UploadError(`${file} is not a file`, false);
  if (info.size > MAX_SINGLE_PUT_BYTES) {
    throw new UploadError(
      `${file} is ${info.size} bytes: a single PUT takes at most ${MAX_SINGLE_PUT_BYTES} (5 GiB); split the output`,
      false,
    );
  }
  const maxAttempts = opts.attempts ?? 5;
  let attempts = 0;
  try {
    return await withRetry(
      async (attempt) => {
        attempts = attempt;
        return { ...(await putOnce(file, info.size, target, opts)), attempts };
      },
      {
        attempts: maxAttempts,
        baseDelayMs: opts.baseDelayMs ?? 1000,
        maxDelayMs: opts.maxDelayMs ?? 30_000,
        // Called only while attempts remain.
        retryable: (err) => {
          const retry = err instanceof UploadError && err.retryable;
          if (retry) opts.onRetry?.({ attempt: attempts, error: err });
          return retry;
        },
      },
    );
  } catch (err) {
    if (err instanceof UploadError && err.retryable) {
      throw new UploadError(
        `${err.message} (gave up after ${attempts} attempt${attempts === 1 ? '' : 's'})`,
        true,
        err.status,
        err.code,
      );
    }
    throw err;
  }
}

/** One PUT of the whole file. */
function putOnce(file: string, size: number, url: URL, opts: UploadOptions): Promise<Omit<UploadResult, 'attempts'>> {
  const timeoutMs = opts.timeoutMs ?? 60_000;
  const headers: Record<string, string | number> = { 'content-length': size, expect: '100-continue' };
  if (opts.contentType) headers['content-type'] = opts.contentType;
  const send = url.protocol === 'https:' ? httpsRequest : httpRequest;

  return new Promise((resolve, reject) => {
    let settled = false;
    const fail = (err: UploadError) => {
      if (settled) return;
      settled = true;
      clearTimeout(continueTimer);
      req.destroy();
      reject(err);
    };
    const req = send(url, { method: 'PUT', headers });
    req.setTimeout(timeoutMs, () => fail(new UploadError(`no progress for ${timeoutMs} ms: timed out`, true)));

    const md5 = createHash('md5');
    let sent = 0;
    let bodyStarted = false;
    let answered = false;
    const startBody = () => {
      if (bodyStarted || answered) return;
      bodyStarted = true;
      clearTimeout(continueTimer);
      const tap = new Transform({
        transform(chunk: Buffer, _enc, done) {
          md5.update(chunk);
          sent += chunk.length;
          done(null, chunk);
        },
      });
      pipeline(createReadStream(file), tap, req).catch((err: NodeJS.ErrnoException) => {
        // A store may answer (and close) before the body is through: its answer is what counts.
        if (answered) return;
        const local = err.syscall === 'open' || err.syscall === 'read';
        fail(new UploadError(`${local ? `reading ${file}` : 'sending'} failed: ${err.code ?? err.message}`, !local));
      });
    };
    const continueTimer = setTimeout(startBody, CONTINUE_WAIT_MS);
    req.on('continue', startBody);

    req.on('response', (res) => {
      answered = true;
      clearTimeout(continueTimer);
      readAnswer(res).then(
        (body) => {
          const status = res.statusCode ?? 0;
          if (status < 200 || status >= 300) return fail(storeRefusal(status, body));
          if (sent !== size) {
            return fail(new UploadError(`the store answered ${status} after ${sent} of ${size} bytes`, true, status));
          }
          const checked = checkEtag(res.headers.etag, md5.digest('hex'), opts.checkEtag ?? true);
          if (checked instanceof UploadError) return fail(checked);
          settled = true;
          resolve({ bytes: size, ...checked });
        },
        (err: Error) => fail(new UploadError(`reading the store's answer failed: ${err.message}`, true)),
      );
    });
    req.on('error', (err: NodeJS.ErrnoException) => {
      if (!answered) fail(new UploadError(`network error: ${err.code ?? err.message}`, true));
    });
  });
}

/** The ETag, checked against the MD5 of the bytes sent when it is a plain MD5. */
function checkEtag(
  header: string | undefined,
  md5: string,
  check: boolean,
): Pick<UploadResult, 'md5' | 'etag' | 'etagChecked'> | UploadError {
  const etag = header ? header.replace(/^W\//, '').replace(/^"|"$/g, '') : null;
  const plainMd5 = check && etag !== null && /^[0-9a-f]{32}$/i.test(etag);
  if (plainMd5 && etag.toLowerCase() !== md5) {
    // Not retried: a store whose ETags are not MD5s (SSE-KMS) would fail every attempt the same way; such a store
    // needs `checkEtag: false`.
    return new UploadError(
      `the store's ETag ${etag} is not the MD5 of the bytes sent (${md5}): the object may be corrupt`,
      false,
    );
  }
  return { md5, etag, etagChecked: plainMd5 };
}

async function readAnswer(res: IncomingMessage): Promise<string> {
  let body = '';
  for await (const chunk of res) {
    if (body.length < MAX_ERROR_BODY) body += (chunk as Buffer).toString('utf8');
  }
  return body.slice(0, MAX_ERROR_BODY);
}

/** The error of a non-2xx answer, with the code and message of S3's XML error body when there is one. */
function storeRefusal(status: number, body: string): UploadError {
  const tag = (name: string) => body.match(new RegExp(`<${name}>([^<]*)</${name}>`))?.[1]?.trim();
  const code = tag('Code');
  const message = tag('Message');
  const retryable = status >= 500 || status === 429;
  const hint =
    status === 403
      ? ' (an expired URL, or one not made for PUT: ask the data owner for a new presigned PUT URL)'
      : retryable
        ? ''
        : ' (not retried)';
  const what = [code, message].filter(Boolean).join(': ');
  return new UploadError(
    `the store refused the upload: ${status}${what ? ` ${what}` : ''}${hint}`,
    retryable,
    status,
    code,
  );
}
