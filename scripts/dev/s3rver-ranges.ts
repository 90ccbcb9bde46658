/**
 * s3rver 3.7 reads a suffix range (`Range: bytes=-N`, the last N bytes) as `bytes=0-N`: it sends the first N + 1
 * bytes with a 206, where S3 and MinIO send the last N. This fixes that in the dev server, so the storage service's
 * ranges behave against `pnpm start`'s store and the tests' as they do against a real one.
 *
 * How: the Range header is signed, so it cannot be rewritten before s3rver checks the signature. A middleware
 * instead notes the suffix length for the request (AsyncLocalStorage), and the store's getObject, which s3rver calls
 * with the misread range, reads the object's size and asks for the real one: the last N bytes, the whole object when
 * N is at least its size, and an unsatisfiable range (416, as S3 answers) for `bytes=-0`.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type S3rver from 's3rver';
import { addMiddleware } from './s3rver-koa.ts';

interface RangeOptions {
  start?: number;
  end?: number;
}

interface ObjectStore {
  getMetadata(bucket: string, key: string): Promise<Record<string, string>>;
  getObject(bucket: string, key: string, options?: RangeOptions): Promise<unknown>;
}

const SUFFIX_RANGE = /^bytes=-(\d+)$/;

/** Serves suffix ranges on an s3rver instance (before its router). */
export function addSuffixRanges(server: S3rver): void {
  const suffix = new AsyncLocalStorage<number>();
  const store = (server as unknown as { store: ObjectStore }).store;
  const getObject = store.getObject.bind(store);
  store.getObject = async (bucket, key, options) => {
    const n = suffix.getStore();
    if (n === undefined) return getObject(bucket, key, options);
    let size: number;
    try {
      size = Number((await store.getMetadata(bucket, key))['content-length']);
    } catch {
      return getObject(bucket, key, options); // a missing object: s3rver answers as it does for any GET
    }
    return getObject(bucket, key, { start: n === 0 ? size : Math.max(0, size - n) });
  };
  const middleware = (
    ctx: { method: string; headers: Record<string, string | undefined> },
    next: () => Promise<void>,
  ) => {
    const m = (ctx.method === 'GET' || ctx.method === 'HEAD') && SUFFIX_RANGE.exec(ctx.headers.range?.trim() ?? '');
    return m ? suffix.run(Number(m[1]), next) : next();
  };
  addMiddleware(server, middleware);
}
