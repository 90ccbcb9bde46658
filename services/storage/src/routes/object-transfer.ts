/**
 * Handlers that move object bytes: streaming upload (never buffered whole,
 * multipart for large bodies, 413 over the limit and nothing stored from a
 * body cut short: `upload-body.ts`),
 * streaming download with Range and conditional requests, HEAD and DELETE.
 * The rules are the domain's (`uploads/upload-policy.ts`, `read-rules.ts`,
 * `objects.ts`); these handlers read the request, move the bytes and answer.
 */
import type { ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import { errors } from '@gpu/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ResolvedTarget as Target } from '../domain/access.ts';
import { contentTypeProblem, resolveContentType } from '../domain/content-type.ts';
import type { StorageContext } from '../domain/context.ts';
import {
  deleteObject as deleteStored,
  downloadUrl,
  headObject as headStored,
  notModifiedValidators,
  readObject,
  uploadObject as storeUpload,
} from '../domain/objects.ts';
import { type ReadHeaders, readConditions } from '../domain/read-rules.ts';
import { NotModified, type ObjectHead } from '../domain/store.ts';
import { objectInfo } from './presenters.ts';
import { storeBody } from './upload-body.ts';

export function uploadObject(ctx: StorageContext, target: Target, request: FastifyRequest, reply: FastifyReply) {
  const given = request.headers['content-type'];
  const problem = given === undefined ? undefined : contentTypeProblem(given);
  if (problem) {
    throw errors.validation(`invalid Content-Type: ${problem}`, [{ path: 'headers.content-type', message: problem }]);
  }
  return storeBody(ctx, request, reply, async (body) => {
    const stored = await storeUpload(ctx.store, {
      bucket: target.bucket,
      key: target.key,
      body,
      contentType: resolveContentType(given, target.key),
      contentLength: body.declared,
      signal: request.abortSignal,
    });
    return reply.code(201).send(objectInfo({ ...stored, key: stored.key.slice(target.folder.length) }));
  });
}

function readHeaders(request: FastifyRequest): ReadHeaders {
  const h = request.headers;
  return { range: h.range, ifNoneMatch: h['if-none-match'], ifModifiedSince: h['if-modified-since'] };
}

function setObjectHeaders(reply: FastifyReply, head: ObjectHead) {
  reply.header('content-type', head.contentType);
  reply.header('content-length', String(head.contentLength));
  reply.header('accept-ranges', 'bytes');
  if (head.etag) reply.header('etag', head.etag);
  if (head.lastModified) reply.header('last-modified', head.lastModified.toUTCString());
}

/** 304 with the validators RFC 9110 asks for. */
async function notModified(ctx: StorageContext, target: Target, reply: FastifyReply, err: NotModified) {
  const { etag, lastModified } = await notModifiedValidators(ctx.store, target, err);
  if (etag) reply.header('etag', etag);
  if (lastModified) reply.header('last-modified', lastModified);
  return reply.code(304).send();
}

/** Bytes gathered from the store before each write to the client (a download holds at most this much more). */
const WRITE_BATCH = 1024 * 1024;

/**
 * Copies the store's response to the client in writes of about `WRITE_BATCH` bytes: the chunks read meanwhile
 * (64 KiB each) go out corked, as one writev. Why: on the benchmark VM, the kernel work of each write (waking the
 * reader on the other core) was most of the service's CPU per download; one write per 64 KiB chunk
 * (`pipeline`) cost 1.06-1.19 CPU seconds per 512 MiB, one per MiB 0.65-0.83 (interleaved runs; the throughput
 * gain varied from none to a fifth). Backpressure holds: reading pauses while the client's socket is full. A
 * store error or a client that goes away rejects, and stops reading from the store.
 */
function sendInBatches(body: Readable, res: ServerResponse): Promise<void> {
  return new Promise((resolve, reject) => {
    let pending: Buffer[] = [];
    let size = 0;
    const flush = (): boolean => {
      res.cork();
      let ok = true;
      for (const chunk of pending) ok = res.write(chunk);
      res.uncork();
      pending = [];
      size = 0;
      return ok;
    };
    const fail = (err: Error) => {
      body.destroy();
      reject(err);
    };
    body.on('data', (chunk: Buffer) => {
      pending.push(chunk);
      size += chunk.length;
      if (size >= WRITE_BATCH && !flush()) {
        body.pause();
        res.once('drain', () => body.resume());
      }
    });
    body.once('end', () => {
      if (size > 0) flush();
      res.end(() => resolve());
    });
    body.once('error', fail);
    // A write racing the client's disconnect fails on the response: answered here, never an unhandled 'error'.
    res.on('error', fail);
    res.once('close', () => {
      if (!res.writableFinished) fail(new Error('the client closed the connection mid-download'));
    });
  });
}

export async function downloadObject(
  ctx: StorageContext,
  target: Target,
  request: FastifyRequest,
  reply: FastifyReply,
) {
  if ((request.query as { redirect?: boolean }).redirect) {
    // The bytes skip the service: the client follows the Location to the store, with its own Range or conditions.
    const url = await downloadUrl(ctx.store, target);
    return reply.code(307).header('location', url).header('cache-control', 'no-store').send();
  }
  try {
    const obj = await readObject(ctx.store, target, readConditions(readHeaders(request)), request.abortSignal);
    setObjectHeaders(reply, obj);
    if (obj.partial && obj.contentRange) {
      reply.header('content-range', obj.contentRange);
      reply.code(206);
    }
    // The bytes go from the store's response to the socket in large writes (sendInBatches), not through
    // Fastify's stream sending, which cost about a tenth of the throughput on a busy machine (pnpm bench
    // storage). onResponse hooks (metrics, timeout clean-up) still run when the response finishes; a broken
    // transfer cuts the connection.
    reply.hijack();
    reply.raw.writeHead(reply.statusCode, reply.getHeaders() as Record<string, string>);
    await sendInBatches(obj.body, reply.raw).catch((err: unknown) => {
      request.log.warn({ err }, 'download interrupted');
      reply.raw.destroy();
    });
    return reply;
  } catch (err) {
    if (err instanceof NotModified) return notModified(ctx, target, reply, err);
    throw err;
  }
}

export async function headObject(ctx: StorageContext, target: Target, request: FastifyRequest, reply: FastifyReply) {
  try {
    const { range: _ignored, ...cond } = readConditions(readHeaders(request));
    const head = await headStored(ctx.store, target, cond);
    setObjectHeaders(reply, head);
    return reply.code(200).send();
  } catch (err) {
    if (err instanceof NotModified) return notModified(ctx, target, reply, err);
    throw err;
  }
}

export async function deleteObject(ctx: StorageContext, target: Target, request: FastifyRequest, reply: FastifyReply) {
  await deleteStored(ctx.store, target, { ifMatch: request.headers['if-match'] });
  return reply.code(204).send();
}
