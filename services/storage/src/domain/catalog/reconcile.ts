/**
 * Reconciliation: the catalog compared with the store, for what the service did not see written or deleted
 * (presigned PUTs straight to the store, other tools, a catalog write that failed after its store write).
 *
 * - Which buckets: the default bucket, every bucket with an owner record, and every bucket the catalog knows. A bucket
 *   made at the store itself joins the catalog when it is first listed or written through the service (a listing
 *   of a bucket never reconciled reconciles it first, whole). The records bucket is the service's own and never
 *   catalogued.
 * - How a range of a bucket is compared: the store's listing, a page of 1,000 keys at a time. A key the catalog lacks,
 *   or holds with another ETag or size, is HEADed for its content type (5 at a time) and written, the HEAD and the
 *   row under the key's lock as a request's write or delete holds it (a key deleted meanwhile leaves no row); rows of
 *   the page's key range that the page does not hold are removed. An unchanged object costs no store request beyond
 *   the listing.
 * - Each run, two things, so that no run lists the whole store:
 *   - the keys the service handed out write URLs for (presigned PUTs, write grants; noted by `cataloged-store.ts`
 *     until the URL expires, and an hour past it for an upload still under way), each HEADed and written: an object
 *     put through such a URL shows within one period wherever the sweep is;
 *   - the sweep: at most `pagesPerRun` listing pages, going on from where the last run stopped (its position is kept
 *     in the database), bucket after bucket in byte order and round again. A full pass over N objects takes about
 *     N / (1,000 × `pagesPerRun`) periods; a store smaller than a run's pages is compared whole every period.
 * - Requests write during a run: rows written after the run started are left as they are (neither replaced nor
 *   removed), so a run never undoes a request's write; what a run missed, a later one sees.
 * - When: at start, then every `reconcile_interval` (`0s`: at start only), periods starting at its multiples since
 *   the epoch so that every instance agrees; one instance a period, the one whose claim (a row per period in the
 *   database) went in first. A run cut short (the instance stopped) is gone on with by the next period's, from the
 *   last page it finished.
 */
import { forEachLimited, type Logger } from '@gpu/common';
import type { BucketOwners } from '../bucket-owners.ts';
import type { ObjectEntry, ObjectHead, ObjectStore } from '../store.ts';
import { catalogRow, type ObjectCatalog, type ObjectOwners, type SweepPosition } from './catalog.ts';

/** Keys per store listing page. */
const PAGE = 1000;
/**
 * HEAD requests in flight for new or changed objects, each holding a database connection (its key's lock) while it
 * runs: half the default pool at most, the rest left to requests.
 */
const HEAD_CONCURRENCY = 5;
/** How long past its URL's expiry an expected write is still looked at: an upload through it may still be under way. */
const EXPECTED_WRITE_GRACE_MS = 3_600_000;

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
  /** Listing pages (1,000 keys each) the sweep reads per run; 0: no bound (the whole store every run). */
  pagesPerRun: number;
  logger: Logger;
}

/** What one scheduled run did: expected writes looked at, sweep pages listed, objects compared, buckets finished. */
export interface RunReport {
  expected: number;
  pages: number;
  objects: number;
  bucketsFinished: number;
}

/** A range of one bucket compared: its pages and objects, and where it stopped (`done`: at the bucket's end). */
interface RangeResult {
  pages: number;
  objects: number;
  done: boolean;
  after?: string;
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
      const report = await this.scheduledRun();
      logger.info(report, 'object catalog reconciled with the store');
    } catch (err) {
      logger.warn({ err: (err as Error).message }, 'reconciling the object catalog failed; trying at the next period');
    }
  }

  /** The buckets reconciled, in byte order: the default one, those with an owner record, those the catalog knows. */
  private async bucketNames(): Promise<string[]> {
    const { catalog, bucketOwners, defaultBucket, recordsBucket } = this.opts;
    const names = new Set([...(defaultBucket ? [defaultBucket] : []), ...(await bucketOwners.ownedBuckets())]);
    for (const name of await catalog.knownBuckets()) names.add(name);
    names.delete(recordsBucket);
    return byBytes([...names]);
  }

  /** Reconciles every bucket whole, unclaimed (tests, an operator's full pass); how many buckets and objects. */
  async run(): Promise<{ buckets: number; objects: number }> {
    let objects = 0;
    let buckets = 0;
    for (const bucket of await this.bucketNames()) {
      if (this.stopped) break;
      objects += await this.reconcileBucket(bucket);
      buckets++;
    }
    return { buckets, objects };
  }

  /**
   * One period's run (unclaimed here; `start` claims it): the expected writes, then at most `pagesPerRun` pages of the
   * sweep from where the last run stopped.
   */
  async scheduledRun(): Promise<RunReport> {
    const since = await this.opts.catalog.now();
    const expected = await this.lookAtExpectedWrites(since);
    return { expected, ...(await this.sweep(since)) };
  }

  /** HEADs each key a write URL was handed out for and writes what the store holds; how many were looked at. */
  private async lookAtExpectedWrites(since: Date): Promise<number> {
    const { catalog, recordsBucket } = this.opts;
    const writes = (await catalog.expectedWrites()).filter((w) => w.bucket !== recordsBucket);
    const byBucket = new Map<string, string[]>();
    for (const w of writes) {
      const keys = byBucket.get(w.bucket);
      if (keys) keys.push(w.key);
      else byBucket.set(w.bucket, [w.key]);
    }
    for (const [bucket, keys] of byBucket) {
      if (this.stopped) return writes.length;
      const ownerOf = await this.opts.owners.of(bucket);
      const entries = keys.map((key) => ({ key, size: 0, isPrefix: false }));
      try {
        await this.catalogue(bucket, entries, ownerOf, since);
      } catch (err) {
        // Gone with its bucket: the sweep forgets the bucket.
        if ((err as { code?: string }).code !== 'BUCKET_NOT_FOUND') throw err;
      }
    }
    await catalog.forgetExpectedWrites(new Date(since.getTime() - EXPECTED_WRITE_GRACE_MS));
    return writes.length;
  }

  /** At most `pagesPerRun` pages of the store's buckets, from the position the last run left. */
  private async sweep(since: Date): Promise<Omit<RunReport, 'expected'>> {
    const { catalog, pagesPerRun } = this.opts;
    const budget = pagesPerRun > 0 ? pagesPerRun : Number.POSITIVE_INFINITY;
    const report = { pages: 0, objects: 0, bucketsFinished: 0 };
    const names = await this.bucketNames();
    if (names.length === 0) return report;
    const position = await catalog.sweepPosition();
    // The bucket it stopped in, or the next one in byte order when that one is gone; past the last: round again.
    let i = names.findIndex((n) => Buffer.compare(Buffer.from(n), Buffer.from(position.bucket)) >= 0);
    let after = i >= 0 && names[i] === position.bucket ? position.after : undefined;
    if (i < 0) i = 0;
    // Each bucket once a run at most: a run that started in the middle of one leaves its first part to the next run.
    for (let visited = 0; visited < names.length && report.pages < budget && !this.stopped; ) {
      const bucket = names[i]!;
      const range = await this.reconcileRange(bucket, since, after, budget - report.pages);
      report.pages += range.pages;
      report.objects += range.objects;
      let next: SweepPosition;
      if (range.done) {
        report.bucketsFinished++;
        visited++;
        i = (i + 1) % names.length;
        after = undefined;
        next = { bucket: i === 0 ? '' : names[i]! };
      } else {
        after = range.after;
        next = { bucket, ...(after !== undefined ? { after } : {}) };
      }
      await catalog.saveSweepPosition(next);
      if (!range.done) break;
    }
    return report;
  }

  /** Brings the catalog's rows of one bucket in line with the store's listing; how many objects it holds. */
  async reconcileBucket(bucket: string): Promise<number> {
    const since = await this.opts.catalog.now();
    return (await this.reconcileRange(bucket, since, undefined, Number.POSITIVE_INFINITY)).objects;
  }

  /**
   * Compares the bucket's keys after `after` (none: from its start) with the catalog, at most `maxPages` listing
   * pages. Rows written after `since` (by requests; the database's clock, as the rows') are left alone. At the
   * bucket's end it is marked reconciled (and, outside the default bucket, its rows given the bucket's owner).
   */
  private async reconcileRange(
    bucket: string,
    since: Date,
    after: string | undefined,
    maxPages: number,
  ): Promise<RangeResult> {
    const { store, catalog } = this.opts;
    const ownerOf = await this.opts.owners.of(bucket);
    let token: string | undefined;
    let from = after;
    let pages = 0;
    let objects = 0;
    try {
      do {
        const page = await store.listPage({
          bucket,
          prefix: '',
          oneLevel: false,
          maxKeys: PAGE,
          ...(token ? { token } : from !== undefined ? { startAfter: from } : {}),
        });
        pages++;
        token = page.nextToken;
        objects += page.objects.length;
        const keys = byBytes(page.objects.map((o) => o.key));
        const known = await catalog.lookup(bucket, keys);
        const changed = page.objects.filter((o) => {
          const row = known.get(o.key);
          return row === undefined || row.size !== o.size || (o.etag !== undefined && row.etag !== o.etag);
        });
        await this.catalogue(bucket, changed, ownerOf, since);
        // The page covers the keys up to its last (the store lists in UTF-8 byte order); the last page, all the rest.
        const upTo = token ? keys[keys.length - 1] : undefined;
        await catalog.removeOthers(bucket, { after: from, upTo }, keys, since);
        from = upTo;
      } while (token && pages < maxPages && !this.stopped);
    } catch (err) {
      if ((err as { code?: string }).code !== 'BUCKET_NOT_FOUND') throw err;
      await catalog.removeBucket(bucket);
      return { pages, objects: 0, done: true };
    }
    if (token) return { pages, objects, done: false, ...(from !== undefined ? { after: from } : {}) };
    if (!this.opts.owners.perFolder(bucket)) await catalog.setOwner(bucket, ownerOf(''));
    await catalog.markReconciled(bucket, since);
    return { pages, objects, done: true };
  }

  /**
   * Writes each object as a HEAD describes it (its content type, ETag and date), the HEAD and the row under the key's
   * lock (`withKey`), which a request's write or delete of the key holds too: one deleted through the service since
   * the listing is gone at the HEAD (left out) or deleted after its row is written (and the row with it), never a row
   * left without its object. A row a request wrote after `since` stays as it is.
   */
  private async catalogue(
    bucket: string,
    objects: ObjectEntry[],
    ownerOf: (key: string) => string | undefined,
    since: Date,
  ): Promise<void> {
    const { store, catalog } = this.opts;
    await forEachLimited(objects, HEAD_CONCURRENCY, (o) =>
      catalog.withKey(bucket, o.key, async (locked) => {
        let head: ObjectHead;
        try {
          head = await store.head(bucket, o.key, {});
        } catch (err) {
          if ((err as { code?: string }).code !== 'OBJECT_NOT_FOUND') throw err;
          return;
        }
        await locked.put([catalogRow(bucket, o.key, head, ownerOf(o.key))], { staleBefore: since });
      }),
    );
  }
}
