/**
 * What an upload may be: at most `max_upload_size` bytes (the spec's 5 GB
 * bound by default). A larger declared Content-Length is refused before any
 * byte is read; a body without one is counted as it streams and cut off once
 * it passes the limit. Its content type is `content-type.ts`'s rule.
 */
import { Transform, type TransformCallback } from 'node:stream';
import { storageErrors } from '../errors.ts';

/** Raised inside the counting stream when the body passes the limit. */
export class TooLarge extends Error {}

/** Refuses an upload whose declared length is over the limit (before reading it). */
export function checkDeclaredLength(contentLength: number | undefined, limit: number): void {
  if (contentLength !== undefined && contentLength > limit) throw storageErrors.uploadTooLarge(limit);
}

/** Passes bytes through, failing with `TooLarge` once more than `limit` have gone by (no copy, no buffering). */
export function byteLimit(limit: number): Transform {
  let seen = 0;
  return new Transform({
    transform(chunk: Buffer, _enc, cb: TransformCallback) {
      seen += chunk.length;
      if (seen > limit) cb(new TooLarge());
      else cb(null, chunk);
    },
  });
}
