/**
 * Conditional writes and deletes, as S3 and MinIO make them, on the dev server (s3rver 3.7 reads neither header):
 * - DeleteObject with `If-Match` deletes only the object of that ETag (or any, `*`): 412 PreconditionFailed when
 *   another is there, 404 NoSuchKey when none is (the storage service's `DELETE` with `If-Match`, what `gpu storage mv`
 *   sends);
 * - PutObject with `If-None-Match: *` stores only where no object is, else 412 PreconditionFailed: as the storage
 *   service's records are claimed (bucket owners, metering markers). Such writes of one key take turns, each checking
 *   once the one before it has ended, so that of writes sent at once the first to be stored holds and a 412 always
 *   means an object is there (on S3 too: the check is made when the write completes). Unlike S3, an unconditional
 *   write of the key that ends while a conditional one is under way is not noticed by it.
 * Presigned requests carry their conditions as headers as well; a request on a subresource (a multipart upload's
 * part, an ACL, tags) is not an object's write or delete and passes by.
 */
import { existsSync } from 'node:fs';
import type S3rver from 's3rver';
import { addMiddleware, type KoaContext, s3Error } from './s3rver-koa.ts';

interface ConditionStore {
  getResourcePath(bucket: string, key: string | undefined, resource: string): string;
  getMetadata(bucket: string, key: string): Promise<Record<string, string>>;
}

const FAILED = 'At least one of the pre-conditions you specified did not hold';

/** Query parameters naming a subresource of an object or bucket (not the object's own PUT or DELETE). */
const SUBRESOURCES = ['uploadId', 'partNumber', 'uploads', 'acl', 'tagging', 'versionId', 'retention', 'legal-hold'];

/** The object a request names (its bucket and key, URL-decoded), or undefined for a subresource or a bucket. */
function objectOf(url: string): { bucket: string; key: string } | undefined {
  const parsed = new URL(url, 'http://s3rver');
  if (SUBRESOURCES.some((name) => parsed.searchParams.has(name))) return undefined;
  const pathname = parsed.pathname.slice(1);
  const slash = pathname.indexOf('/');
  if (slash <= 0 || slash === pathname.length - 1) return undefined;
  return { bucket: decodeURIComponent(pathname.slice(0, slash)), key: decodeURIComponent(pathname.slice(slash + 1)) };
}

/** Serves `If-Match` on DeleteObject and `If-None-Match: *` on PutObject (before the other additions). */
export function addConditions(server: S3rver): void {
  const store = (server as unknown as { store: ConditionStore }).store;
  const exists = (bucket: string, key: string) => existsSync(store.getResourcePath(bucket, key, 'object'));
  // The last conditional write of each `bucket/key` under way: the next one checks once it has ended.
  const turns = new Map<string, Promise<unknown>>();
  const middleware = async (ctx: KoaContext, next: () => Promise<void>) => {
    const ifMatch = ctx.headers['if-match']?.trim();
    const ifNoneMatch = ctx.headers['if-none-match']?.trim();
    const target = objectOf(ctx.url);
    if (target === undefined) return next();
    if (ctx.method === 'DELETE' && ifMatch !== undefined) {
      if (!exists(target.bucket, target.key)) {
        return s3Error(ctx, 404, 'NoSuchKey', 'The specified key does not exist.');
      }
      const { etag } = await store.getMetadata(target.bucket, target.key);
      if (ifMatch !== '*' && ifMatch !== etag) return s3Error(ctx, 412, 'PreconditionFailed', FAILED);
      return next();
    }
    if (ctx.method === 'PUT' && ifNoneMatch === '*' && ctx.headers['x-amz-copy-source'] === undefined) {
      const name = `${target.bucket}/${target.key}`;
      const before = turns.get(name) ?? Promise.resolve();
      const mine = before.then(() =>
        exists(target.bucket, target.key) ? s3Error(ctx, 412, 'PreconditionFailed', FAILED) : next(),
      );
      const settled = mine.catch(() => {});
      turns.set(name, settled);
      try {
        return await mine;
      } finally {
        if (turns.get(name) === settled) turns.delete(name);
      }
    }
    return next();
  };
  addMiddleware(server, middleware);
}
