/**
 * What the object store can hold of a key, checked before the store is asked anything about it: a key past these
 * limits failed at the store (the embedded s3rver answered 500, a 503 here, for a file name past 255 bytes; S3 refuses
 * a key past 1024 bytes), on every route that names a key. Beside the key rules every party shares (`@gpu/common`'s
 * `objectKeyProblem`: 1-1024 bytes as the caller writes it), the key the store holds (with the caller's folder of the
 * default bucket, `users/{id}/`, in front) keeps:
 *
 * - at most `MAX_STORE_KEY_BYTES` (1024) bytes of UTF-8, S3's limit;
 * - at most `object_store.max_key_segment_bytes` bytes in each `/`-separated segment: a store on a file system keeps a
 *   segment as a file or folder name, at most 255 bytes there. 233 by default, what every store the platform runs on
 *   holds: the embedded s3rver (`pnpm start`, the tests) names a key's file `<segment>._S3rver_metadata.json` (255 - 22),
 *   MinIO (compose) takes 255; S3 has no limit of its own per segment (1024 there: the key's limit alone).
 */

/** S3's limit on a key: 1024 bytes of UTF-8. */
export const MAX_STORE_KEY_BYTES = 1024;

/** The default of `object_store.max_key_segment_bytes`: what every store the platform runs on holds. */
export const DEFAULT_MAX_KEY_SEGMENT_BYTES = 233;

/**
 * Why the store cannot hold `key` (the store's key: `folder` and the caller's own key), or undefined when it can.
 * `folder` is the prefix the caller does not write (their folder of the default bucket), named in the reason.
 */
export function storeKeyProblem(key: string, maxSegmentBytes: number, folder = ''): string | undefined {
  const bytes = Buffer.byteLength(key, 'utf8');
  if (bytes > MAX_STORE_KEY_BYTES) {
    const where = folder ? ` with your folder ${folder}` : '';
    return `is ${bytes} bytes${where}; the store holds keys of at most ${MAX_STORE_KEY_BYTES} bytes of UTF-8`;
  }
  const segments = key.slice(folder.length).split('/');
  for (const [i, segment] of segments.entries()) {
    const length = Buffer.byteLength(segment, 'utf8');
    if (length > maxSegmentBytes) {
      return (
        `has a segment of ${length} bytes (segment ${i + 1}); the store holds at most ${maxSegmentBytes} bytes of ` +
        'UTF-8 between two "/" (object_store.max_key_segment_bytes)'
      );
    }
  }
  return undefined;
}
