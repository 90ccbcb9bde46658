/**
 * What an upload may be, and when it is whole:
 * - at most `max_upload_size` bytes (the spec's 5 GB bound by default): a larger declared Content-Length is refused
 *   before any byte is read; a body without one is counted as it streams and cut off once it passes the limit;
 * - stored only when every byte arrived: a body with a Content-Length is whole at exactly that many bytes, a chunked
 *   body when its last chunk came. A body that ends short or runs long, or is abandoned (the client gone,
 *   half-closed or silent for too long, the transfer out of time), fails whoever reads it: the store's upload is
 *   then given up (a single PUT never finished, a multipart upload aborted) and the earlier object stays as it was.
 * Its content type is `content-type.ts`'s rule.
 */
import { Transform, type TransformCallback } from 'node:stream';
import { storageErrors } from '../../errors.ts';

/** Refuses an upload whose declared length is over the limit (before reading it). */
export function checkDeclaredLength(contentLength: number | undefined, limit: number): void {
  if (contentLength !== undefined && contentLength > limit) throw storageErrors.uploadTooLarge(limit);
}

/**
 * An upload's body on its way to the store: passes the bytes through (no copy, no buffering), failing once more than
 * the limit or the declared length went by, and at its end when fewer than the declared length came. `abandon`
 * fails it from outside.
 */
export class UploadBody extends Transform {
  /** Bytes passed through so far. */
  received = 0;
  /** When the last bytes came (`performance.now()`), for telling a stalled client. */
  lastBytesAt = performance.now();

  constructor(
    private readonly limit: number,
    /** The Content-Length, or undefined for a chunked body. */
    readonly declared: number | undefined,
  ) {
    super();
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    this.received += chunk.length;
    this.lastBytesAt = performance.now();
    if (this.received > this.limit) cb(storageErrors.uploadTooLarge(this.limit));
    else if (this.declared !== undefined && this.received > this.declared) {
      cb(storageErrors.incompleteBody(`the body is longer than its Content-Length of ${this.declared} bytes`));
    } else cb(null, chunk);
  }

  override _flush(cb: TransformCallback): void {
    if (this.declared !== undefined && this.received < this.declared) cb(this.shortBy('the body ended'));
    else cb();
  }

  /** Gives the upload up: `reason` is what its reader fails with (the first reason wins). */
  abandon(reason: Error): void {
    if (!this.destroyed) this.destroy(reason);
  }

  /** INCOMPLETE_BODY naming how much of the body came before `what`. */
  shortBy(what: string): Error {
    const of =
      this.declared === undefined ? 'of a chunked body' : `of the ${this.declared} its Content-Length declared`;
    return storageErrors.incompleteBody(`${what} after ${this.received} bytes ${of}; nothing was stored`);
  }
}
