/**
 * An upload's body as the store reads it: the request's bytes through the domain's `UploadBody` (size limit, declared
 * length), abandoned the moment the request can no longer complete, so that the store's upload is given up at once
 * rather than finished short or left waiting:
 * - the client half-closes its side before the body's end (it still reads): 400 INCOMPLETE_BODY, answered;
 * - the connection breaks (reset, closed): INCOMPLETE_BODY, with nobody left to read it;
 * - no byte arrives for `upload_idle_timeout` while the service is ready to read: 408 CLIENT_TIMEOUT;
 * - the transfer's time limit passes: the request timeout's 503 REQUEST_TIMEOUT.
 */
import type { IncomingMessage } from 'node:http';
import { durationMs, isAppError, onBodyCut } from '@gpu/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { StorageContext } from '../domain/context.ts';
import { checkDeclaredLength, UploadBody } from '../domain/uploads/upload-policy.ts';
import { storageErrors } from '../errors.ts';

interface RequestBody {
  body: UploadBody;
  /** Why the body failed, if it did: the answer to give rather than the store's own complaint about it. */
  failure(): unknown;
  /** Stops watching the request (the upload is over either way). */
  release(): void;
}

/**
 * Reads the request's body into an `UploadBody`, refusing at once a declared length over the limit (by default
 * `max_upload_size`; a part's is what its upload may still take).
 */
function readUploadBody(
  ctx: StorageContext,
  request: FastifyRequest,
  limit = ctx.config.object_store.max_upload_size,
): RequestBody {
  const settings = ctx.config.object_store;
  const declared = request.headers['content-length'];
  const contentLength = declared === undefined ? undefined : Number(declared);
  checkDeclaredLength(contentLength, limit);
  const body = new UploadBody(limit, contentLength);
  let failure: unknown;
  body.on('error', (err) => {
    failure ??= err;
  });
  const source = request.raw;
  const onBroken = () => body.abandon(body.shortBy('the connection closed'));
  source.on('error', onBroken);
  const releaseCut = onBodyCut(request, () => body.abandon(body.shortBy('the client closed its side')));
  const signal = request.abortSignal;
  // The transfer's time limit (REQUEST_TIMEOUT), or the client gone.
  const onAbort = () => body.abandon(isAppError(signal.reason) ? signal.reason : body.shortBy('the connection closed'));
  if (signal.aborted) onAbort();
  else signal.addEventListener('abort', onAbort, { once: true });
  const stopIdleWatch = watchIdle(source, body, durationMs(settings.upload_idle_timeout));
  source.pipe(body);
  return {
    body,
    failure: () => failure,
    release() {
      source.unpipe(body);
      releaseCut();
      stopIdleWatch();
      // onBroken stays: an 'error' the request emits later (its connection closing) must find a listener.
      signal.removeEventListener('abort', onAbort);
    },
  };
}

/**
 * Hands the request's body to `store`, which stores it and answers. A body that failed (too large, cut short,
 * stalled, out of time) is the answer rather than what the store made of it; a refused body is not read to its end
 * (the connection closes); a request whose time ran out was answered already (503 REQUEST_TIMEOUT).
 */
export async function storeBody(
  ctx: StorageContext,
  request: FastifyRequest,
  reply: FastifyReply,
  store: (body: UploadBody) => Promise<FastifyReply>,
  limit?: number,
): Promise<FastifyReply> {
  const { body, failure, release } = readUploadBody(ctx, request, limit);
  try {
    return await store(body);
  } catch (err) {
    if (reply.sent) return reply;
    if (!request.raw.complete) reply.header('connection', 'close');
    throw failure() ?? err;
  } finally {
    release();
  }
}

/**
 * Abandons the body when no byte of it arrived for `idleMs` while the service was ready for more. While the request
 * is paused (the store slower than the client: the service holds the body back), the clock is held.
 */
function watchIdle(source: IncomingMessage, body: UploadBody, idleMs: number): () => void {
  if (idleMs <= 0) return () => {};
  let heldUntil = performance.now();
  let timer: NodeJS.Timeout;
  const check = () => {
    const now = performance.now();
    if (source.readableFlowing === false) heldUntil = now;
    const waited = now - Math.max(body.lastBytesAt, heldUntil);
    if (waited >= idleMs) body.abandon(storageErrors.uploadStalled(idleMs));
    else timer = setTimeout(check, idleMs - waited).unref();
  };
  timer = setTimeout(check, idleMs).unref();
  const stop = () => clearTimeout(timer);
  body.once('close', stop);
  return stop;
}
