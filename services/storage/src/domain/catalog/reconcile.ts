/**
 * Reconciliation: the catalog compared with the store, bucket by bucket, for what the service did not see written or
 * deleted (presigned PUTs straight to the store, other tools, a catalog write that failed after its store write).
 *
 * - Which buckets: the default bucket, every bucket with an owner record, and every bucket the catalog knows. A bucket
 *   made at the store itself joins the catalog when it is first listed or written through the service (a listing
 *   of a bucket never reconciled reconciles it first). The records bucket is the service's own and never catalogued.
 * - How: the store's listing, a page of 1,000 keys at a time. A key the catalog lacks, or holds with another ETag or
 *   size, is HEADed for its content type (16 at a time) and written; rows of the page's key range that the page does
 *   not hold are removed. An unchanged object costs no store request beyond the listing.
 * - Requests write during a run: rows written after the run started are left as they are (neither replaced nor
 *   removed), so a run never undoes a request's write; what a run missed, the next one sees.
 * - When: at start, then every `reconcile_interval` (`0s`: at start only), periods starting at its multiples since
 *   the epoch so that every instance agrees; one instance a period, the one whose claim (a row per period in the
 *   database) went in first. A run cut short (the instance stopped) is completed by the next period's.
 */
import { forEachLimited, type Logger } from '@gpu/common';
import type { BucketOwners } from '../bucket-owners.ts';
import type { ObjectEntry, ObjectStore } from '../store.ts';
import type { CatalogObject, ObjectCatalog, ObjectOwners } from './catalog.ts';

/** Keys per store listing page. */
const PAGE = 1000;
/** HEAD requests in flight for new or changed objects' content types. */
const HEAD_CONCURRENCY = 16;

export interface ReconcilerOptions {
  store: ObjectStore;
  catalog: ObjectCatalog;
  owners: ObjectOwners;
  bucketOwners: BucketOwners;
  defaultBucket: string;
  recordsBucket: string;
  instanceId: string;
  /** The period between runs; 0: at start only. */
  intervalMs: number;
  logger: Logger;
}

/** Sorts keys by their UTF-8 bytes, the catalog's order. */
const byBytes = (keys: string[]) =>
  keys
    .map((key) => ({ key, bytes: Buffer.from(key) }))
    .sort((a, b) => Buffer.compare(a.bytes, b.bytes))
    .map(({ key }) => key);

export class Reconciler {
  private timer?: NodeJS.Timeout;
  private running?: Promise<unknown>;
  private stopped = false;
  /** Buckets being adopted by a listing now, so concurrent listings wait for one run. */
  private readonly adopting = new Map<string, Promise<number>>();

  constructor(private readonly opts: ReconcilerOptions) {}

  /** Reconciles now (if this instance claims the current period), then at every period's start. */
  start(): void {
    if (this.timer !== undefined) return;
    this.stopped = false;
    const { intervalMs } = this.opts;
    const tick = () => {
      this.running ??= this.claimAndRun().finally(() => {
        this.running = undefined;
      });
      if (intervalMs <= 0) return;
      this.timer = setTimeout(tick, intervalMs - (Date.now() % intervalMs) + 1000);
      this.timer.unref();
    };
    tick();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
    await this.running;
  }

  /**
   * Whether `bucket` is listed from the catalog: false for the records bucket (listed as empty); a bucket missing at
   * the store is BUCKET_NOT_FOUND; one the catalog never reconciled is reconciled first.
   */
  async ensureCatalogued(bucket: string): Promise<boolean> {
    await this.opts.store.bucketMustExist(bucket);
    if (bucket === this.opts.recordsBucket) return false;
    if ((await this.opts.catalog.reconciledAt(bucket)) !== undefined) return true;
    const adoption = this.adopting.get(bucket) ?? this.reconcileBucket(bucket);
    if (!this.adopting.has(bucket)) {
      this.adopting.set(bucket, adoption);
      void adoption.finally(() => this.adopting.delete(bucket)).catch(() => {});
    }
    await adoption;
    return true;
  }

  private async claimAndRun(): Promise<void> {
    const { intervalMs, catalog, instanceId, logger } = this.opts;
    try {
      const now = Date.now();
      const periodStart = intervalMs > 0 ? Math.floor(now / intervalMs) * intervalMs : now;
      if (!(await catalog.claimPeriod(new Date(periodStart), instanceId))) return;
      const { buckets, objects } = await this.run();
      logger.info({ buckets, objects }, 'object catalog reconciled with the store');
    } catch (err) {
      logger.warn({ err: (err as Error).message }, 'reconciling the object catalog failed; trying at the next period');
    }
  }

  /** Reconciles every bucket (unclaimed: tests and the claimed run); how many buckets and objects were compared. */
  async run(): Promise<{ buckets: number; objects: number }> {
    const { catalog, bucketOwners, defaultBucket, recordsBucket } = this.opts;
    const names = new Set([...(defaultBucket ? [defaultBucket] : []), ...(await bucketOwners.ownedBuckets())]);
    for (const name of await catalog.knownBuckets()) names.add(name);
    names.delete(recordsBucket);
    let objects = 0;
    let buckets = 0;
    for (const bucket of names) {
      if (this.stopped) break;
      objects += await this.reconcileBucket(bucket);
      buckets++;
    }
    return { buckets, objects };
  }

  /** Brings the catalog's rows of one bucket in line with the store's listing; how many objects it holds. */
  async reconcileBucket(bucket: string): Promise<number> {
    const { store, catalog } = this.opts;
    // Rows written after this (by requests) are left alone: the database's clock, as the rows'.
    const since = await catalog.now();
    const ownerOf = await this.opts.owners.of(bucket);
    let token: string | undefined;
    let after: string | undefined;
    let count = 0;
    try {
      do {
        const page = await store.listPage({ bucket, prefix: '', oneLevel: false, token, maxKeys: PAGE });
        token = page.nextToken;
        count += page.objects.length;
        const keys = byBytes(page.objects.map((o) => o.key));
        const known = await catalog.lookup(bucket, keys);
        const changed = page.objects.filter((o) => {
          const row = known.get(o.key);
          return row === undefined || row.size !== o.size || (o.etag !== undefined && row.etag !== o.etag);
        });
        await catalog.put(await this.described(bucket, changed, ownerOf), { staleBefore: since });
        // The page covers the keys up to its last (the store lists in UTF-8 byte order); the last page, all the rest.
        const upTo = token ? keys[keys.length - 1] : undefined;
        await catalog.removeOthers(bucket, { after, upTo }, keys, since);
        after = upTo;
      } while (token && !this.stopped);
    } catch (err) {
      if ((err as { code?: string }).code !== 'BUCKET_NOT_FOUND') throw err;
      await catalog.removeBucket(bucket);
      return 0;
    }
    if (this.stopped) return count;
    if (!this.opts.owners.perFolder(bucket)) await catalog.setOwner(bucket, ownerOf(''));
    await catalog.markReconciled(bucket, since);
    return count;
  }

  /** The objects with their content types (a HEAD each); one deleted since the listing is left out. */
  private async described(
    bucket: string,
    objects: ObjectEntry[],
    ownerOf: (key: string) => string | undefined,
  ): Promise<CatalogObject[]> {
    const rows: CatalogObject[] = [];
    await forEachLimited(objects, HEAD_CONCURRENCY, async (o) => {
      try {
        const head = await this.opts.store.head(bucket, o.key, {});
        rows.push({
          bucket,
          key: o.key,
          size: head.contentLength,
          contentType: head.contentType,
          etag: head.etag,
          lastModified: head.lastModified,
          ownerId: ownerOf(o.key),
        });
      } catch (err) {
        if ((err as { code?: string }).code !== 'OBJECT_NOT_FOUND') throw err;
      }
    });
    return rows;
  }
}
