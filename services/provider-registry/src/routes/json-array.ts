/**
 * Sends a JSON array whose elements are already rendered (discovery pages: one
 * Provider each, rendered by PostgreSQL) without building the page as one
 * string or one fresh buffer. A page is 160-280 KB: as a string V8 places it in
 * its large-object space, and as a new Buffer it counts as external memory;
 * either way every few requests cost a full mark-compact, which was the
 * registry's latency tail. The elements are encoded into a buffer taken from
 * a small pool of reusable ones instead, handed back once the response has
 * been flushed.
 */
import type { FastifyReply } from 'fastify';

/** Smallest pooled buffer; sizes go up in powers of two. */
const MIN_CLASS = 64 * 1024;
/** Pages larger than this get a buffer of their own (a full page of 1,000 providers is about 2.5 MB). */
const MAX_CLASS = 8 * 1024 * 1024;
/**
 * Free buffers kept per size class. The pool holds at most this many of each class it has seen: with pages of
 * every size up to the 4 MB class, 4 × (64 KB + … + 4 MB) ≈ 32 MB; with the usual 100-provider pages, 4 × 256 KB.
 */
const FREE_PER_CLASS = 4;

function classOf(size: number): number {
  let c = MIN_CLASS;
  while (c < size) c *= 2;
  return c;
}

/** The byte length of `[e1,e2,...]`. */
function arrayLength(elements: string[]): number {
  let size = 2 + Math.max(0, elements.length - 1);
  for (const e of elements) size += Buffer.byteLength(e);
  return size;
}

/** Writes `[e1,e2,...]` (UTF-8) into `out` and returns the bytes written. */
export function encodeJsonArray(elements: string[], out: Buffer): number {
  let at = out.write('[', 0, 'latin1');
  elements.forEach((e, i) => {
    if (i > 0) at += out.write(',', at, 'latin1');
    at += out.write(e, at, 'utf8');
  });
  return at + out.write(']', at, 'latin1');
}

/** A pool of reusable response buffers (one per app) and the sender of pre-rendered arrays. */
export class JsonArraySender {
  private readonly free = new Map<number, Buffer[]>();

  private take(size: number): { buffer: Buffer; pooled: boolean } {
    const c = classOf(size);
    if (c > MAX_CLASS) return { buffer: Buffer.allocUnsafeSlow(size), pooled: false };
    return { buffer: this.free.get(c)?.pop() ?? Buffer.allocUnsafeSlow(c), pooled: true };
  }

  private giveBack(buffer: Buffer): void {
    const list = this.free.get(buffer.length) ?? [];
    if (list.length < FREE_PER_CLASS) list.push(buffer);
    this.free.set(buffer.length, list);
  }

  /** Sends `[e1,e2,...]` as `application/json`. */
  send(reply: FastifyReply, elements: string[]): FastifyReply {
    const size = arrayLength(elements);
    const { buffer, pooled } = this.take(size);
    const body = buffer.subarray(0, encodeJsonArray(elements, buffer));
    // Reused only once every byte went to the socket; a response cut short leaves its buffer to the GC.
    if (pooled) reply.raw.once('finish', () => this.giveBack(buffer));
    return reply.type('application/json; charset=utf-8').send(body);
  }
}
