/**
 * The object store as the routes and rules use it: every write that succeeds at the store is written to the catalog
 * in the same request (uploads, copies, a resumable upload's completion, deletes), so a listing right after it sees it.
 *
 * Order: the store first, it holds the bytes; the catalog after. A catalog write that fails (the database away)
 * fails the request with 503 `DEPENDENCY_UNAVAILABLE` although the store did the write: the client learns that
 * something went wrong and may repeat it, and reconciliation puts the catalog right in any case (`reconcile.ts`, at
 * its sweep's pace). A write URL (a presigned PUT, a write grant) notes its key for reconciliation to look at every run
 * until it expires. Writes to the service's own records bucket
 * (owner records, upload records, metering markers) are not catalogued: they are no one's objects.
 */
import { errors } from '@gpu/common';
import { storageErrors } from '../../errors.ts';
import type {
  CopyRequest,
  ObjectBody,
  ObjectHead,
  ObjectStore,
  PartCopyRequest,
  PartInfo,
  PartRequest,
  ReadConditions,
  StoredPart,
  StorePage,
  StorePageRequest,
  UploadRequest,
} from '../store.ts';
import { catalogRow, type ObjectCatalog, type ObjectOwners, type WriteUrlOwner } from './catalog.ts';

export class CatalogedStore implements ObjectStore {
  constructor(
    private readonly inner: ObjectStore,
    private readonly catalog: ObjectCatalog,
    private readonly owners: ObjectOwners,
    private readonly recordsBucket: string,
  ) {}

  /** Stores the upload and catalogues it: the head it read for that is answered, sparing the caller another HEAD. */
  async upload(req: UploadRequest): Promise<ObjectHead | undefined> {
    await this.inner.upload(req);
    return this.catalogued(req.bucket, req.key);
  }

  /**
   * Copies at the store and catalogues the copy, as an upload. The key is noted first, as a write URL's is: should the
   * request fail with the store copying on (the caller gone, the catalog away), reconciliation finds the copy.
   */
  async copy(req: CopyRequest): Promise<ObjectHead | undefined> {
    const { bucket, key } = req.destination;
    if (bucket === this.recordsBucket) return this.inner.copy(req);
    const expected = { bucket, key, until: req.until };
    await this.write(() => this.catalog.expectWrite(expected));
    await this.inner.copy(req);
    const head = await this.catalogued(bucket, key);
    // Catalogued: reconciliation need not look at the key for this copy (a write URL's note of the key stays).
    await this.write(() => this.catalog.forgetExpectedWrite(expected));
    return head;
  }

  async completeMultipart(bucket: string, key: string, uploadId: string, parts: StoredPart[]): Promise<void> {
    await this.inner.completeMultipart(bucket, key, uploadId, parts);
    await this.catalogued(bucket, key);
  }

  /** Deletes at the store and removes the row, under the key's lock (an upload's cataloguing waits, or goes first). */
  async delete(bucket: string, key: string, opts: { ifMatch?: string } = {}): Promise<void> {
    if (bucket === this.recordsBucket) return this.inner.delete(bucket, key, opts);
    await this.locked(bucket, key, async (catalog) => {
      await this.inner.delete(bucket, key, opts);
      await this.write(() => catalog.remove(bucket, key));
    });
  }

  async ensureBucket(bucket: string): Promise<'created' | 'exists'> {
    const outcome = await this.inner.ensureBucket(bucket);
    // A bucket made just now is empty: the catalog is complete for it (one that existed is reconciled when used).
    if (outcome === 'created' && bucket !== this.recordsBucket) {
      await this.write(async () => this.catalog.markReconciled(bucket, await this.catalog.now()));
    }
    return outcome;
  }

  /**
   * Writes the object as the store describes it now (a HEAD: the ETag, date and type the store holds), and answers
   * that head (undefined for the records bucket, which is not catalogued, or an object deleted again already).
   */
  private async catalogued(bucket: string, key: string): Promise<ObjectHead | undefined> {
    if (bucket === this.recordsBucket) return undefined;
    const ownerOf = await this.owners.of(bucket);
    // Under the key's lock, the HEAD reads the store's latest for the key (a delete or another write of it waits, or
    // went first), so its row replaces whatever the catalog holds: a Last-Modified may be older than the row's (S3
    // dates a multipart object at its upload's start) and still be the latest.
    return this.locked(bucket, key, async (catalog) => {
      let head: ObjectHead;
      try {
        head = await this.inner.head(bucket, key, {});
      } catch (err) {
        // Deleted again already (a concurrent request): the catalog follows.
        if ((err as { code?: string }).code !== 'OBJECT_NOT_FOUND') throw err;
        await this.write(() => catalog.remove(bucket, key));
        return undefined;
      }
      await this.write(() => catalog.put([catalogRow(bucket, key, head, ownerOf(key))], { latest: true }));
      return head;
    });
  }

  /** `fn` under the key's lock (`ObjectCatalog.withKey`); the lock's own failure (the database away) is a 503. */
  private async locked<T>(
    bucket: string,
    key: string,
    fn: (catalog: Pick<ObjectCatalog, 'put' | 'remove'>) => Promise<T>,
  ): Promise<T> {
    let failed: { err: unknown } | undefined;
    try {
      return await this.catalog.withKey(bucket, key, async (catalog) => {
        try {
          return await fn(catalog);
        } catch (err) {
          failed = { err };
          throw err;
        }
      });
    } catch (err) {
      if (failed) throw failed.err;
      throw errors.dependencyUnavailable('database', err);
    }
  }

  private async write<T>(op: () => Promise<T>): Promise<T> {
    try {
      return await op();
    } catch (err) {
      throw errors.dependencyUnavailable('database', err);
    }
  }

  ping(): Promise<void> {
    return this.inner.ping();
  }
  bucketMustExist(bucket: string): Promise<void> {
    return this.inner.bucketMustExist(bucket);
  }
  get(bucket: string, key: string, cond: ReadConditions, signal?: AbortSignal): Promise<ObjectBody> {
    return this.inner.get(bucket, key, cond, signal);
  }
  head(bucket: string, key: string, cond: ReadConditions): Promise<ObjectHead> {
    return this.inner.head(bucket, key, cond);
  }
  listPage(req: StorePageRequest): Promise<StorePage> {
    return this.inner.listPage(req);
  }
  /**
   * A write URL's key is noted first (until the URL expires): reconciliation looks at it every run, so what is written
   * through it shows within `reconcile_interval` however far the sweep over the store has to go. With `owner`, the
   * user it is handed to: 409 TOO_MANY_WRITE_URLS when they have `owner.max` other keys with write URLs open (each
   * such key costs every reconciliation run a look at the store).
   */
  async presign(
    bucket: string,
    key: string,
    method: 'GET' | 'PUT',
    expiresInSeconds: number,
    owner?: WriteUrlOwner,
  ): Promise<string> {
    if (method === 'PUT' && bucket !== this.recordsBucket) {
      const until = new Date(Date.now() + expiresInSeconds * 1000);
      const noted = await this.write(() => this.catalog.noteWriteUrl({ bucket, key, until }, owner));
      if (!noted && owner) throw storageErrors.tooManyWriteUrls(owner.max);
    }
    return this.inner.presign(bucket, key, method, expiresInSeconds);
  }
  createMultipart(bucket: string, key: string, contentType: string): Promise<string> {
    return this.inner.createMultipart(bucket, key, contentType);
  }
  uploadPart(part: PartRequest): Promise<string> {
    return this.inner.uploadPart(part);
  }
  copyPart(part: PartCopyRequest): Promise<string> {
    return this.inner.copyPart(part);
  }
  listParts(bucket: string, key: string, uploadId: string): Promise<PartInfo[]> {
    return this.inner.listParts(bucket, key, uploadId);
  }
  abortMultipart(bucket: string, key: string, uploadId: string): Promise<void> {
    return this.inner.abortMultipart(bucket, key, uploadId);
  }
  close(): void {
    this.inner.close();
  }
}
