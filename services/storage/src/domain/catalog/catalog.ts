/**
 * The object catalog: every object of the store's buckets (but the service's own records bucket) with its key,
 * size, content type, ETag, owner and times, kept in the service's database so that a listing with content types,
 * the usage of an owner and metering read one table instead of one store request per object.
 *
 * - The store holds the bytes and is the truth; the catalog follows it. A write through the service (upload,
 *   resumable upload's completion, delete) updates the catalog in the same request, after the store: a listing right
 *   after it sees it (`cataloged-store.ts`).
 * - What the service does not see (presigned PUTs straight to the store, other tools, a catalog write that failed
 *   after its store write) is put right by reconciliation, at start and every `reconcile_interval` (`reconcile.ts`).
 * - Owners are derived as the access rules have them: a bucket's owner record, or, in the default bucket, the user of
 *   the `users/{id}/` folder (`ObjectOwners`).
 *
 * This module is the port the domain needs; `db/object-repository.ts` implements it over PostgreSQL or PGlite.
 */
import type { BucketOwners } from '../bucket-owners.ts';
import type { ObjectEntry, ObjectHead } from '../store.ts';

/** An object as the catalog holds it. */
export interface CatalogObject {
  bucket: string;
  key: string;
  size: number;
  contentType?: string;
  etag?: string;
  ownerId?: string;
  lastModified?: Date;
}

/** The row of an object as the store's HEAD describes it. */
export function catalogRow(bucket: string, key: string, head: ObjectHead, ownerId: string | undefined): CatalogObject {
  return {
    bucket,
    key,
    size: head.contentLength,
    contentType: head.contentType,
    etag: head.etag,
    lastModified: head.lastModified,
    ownerId,
  };
}

/** Rows of one bucket in key order (UTF-8 bytes), from a position on. */
export interface CatalogPageRequest {
  bucket: string;
  /** Only keys starting with this. */
  prefix: string;
  /** Rows after this key (at or after it when `inclusive`). */
  after?: string;
  inclusive?: boolean;
  limit: number;
}

/** Where reconciliation's sweep goes on: in `bucket` ('' : the first bucket), after the key `after` (none: its start). */
export interface SweepPosition {
  bucket: string;
  after?: string;
}

/** A key the service handed out a write URL for, and when the URL stops working. */
export interface ExpectedWrite {
  bucket: string;
  key: string;
  until: Date;
}

/** The user a write URL is handed to, and the most keys with write URLs open they may have. */
export interface WriteUrlOwner {
  id: string;
  max: number;
}

/** The catalog's storage, as the rules use it. */
export interface ObjectCatalog {
  /** The database's clock: the times rows are written with. */
  now(): Promise<Date>;
  /**
   * Inserts or replaces rows. With `staleBefore` (reconciliation) only rows last written before it are replaced, so a
   * request's write during the run stands; with `latest` (read from the store under the key's lock: `withKey`) a row
   * is replaced whatever it holds; with neither, a row is not replaced by an older version of the object.
   */
  put(objects: CatalogObject[], opts?: { staleBefore?: Date; latest?: boolean }): Promise<void>;
  remove(bucket: string, key: string): Promise<void>;
  /**
   * Runs `fn` holding the key's lock until it returns (a transaction-scoped advisory lock), with the catalog writing in
   * that transaction: a request's write or delete at the store and its row of the key are one step against every
   * other request's of the same key, so no row outlives its object and none is missing for a newer one.
   */
  withKey<T>(
    bucket: string,
    key: string,
    fn: (catalog: Pick<ObjectCatalog, 'put' | 'remove'>) => Promise<T>,
  ): Promise<T>;
  /**
   * Removes the rows of `bucket` whose keys lie in `(after, upTo]` (an absent bound: open) but are not in `keep`, and
   * that were last written before `staleBefore`.
   */
  removeOthers(
    bucket: string,
    range: { after?: string; upTo?: string },
    keep: string[],
    staleBefore: Date,
  ): Promise<void>;
  /** Forgets a bucket gone from the store, and its rows. */
  removeBucket(bucket: string): Promise<void>;
  /** The ETag and size of those of `keys` that have a row. */
  lookup(bucket: string, keys: string[]): Promise<Map<string, { etag?: string; size: number }>>;
  page(req: CatalogPageRequest): Promise<ObjectEntry[]>;
  /** Sets the owner of every row of a bucket (outside the default bucket, where owners are per folder). */
  setOwner(bucket: string, ownerId: string | undefined): Promise<void>;
  /** Bytes per owner (rows with an owner). */
  usageByOwner(): Promise<Map<string, number>>;
  /** When the bucket was last found complete against the store; undefined: never. */
  reconciledAt(bucket: string): Promise<Date | undefined>;
  markReconciled(bucket: string, at: Date): Promise<void>;
  knownBuckets(): Promise<string[]>;
  /** Claims the reconciliation of the period starting at `periodStart`: true for the one claim that inserts it. */
  claimPeriod(periodStart: Date, instanceId: string): Promise<boolean>;
  /** Where the sweep stopped last (the first bucket's start when it never ran). */
  sweepPosition(): Promise<SweepPosition>;
  saveSweepPosition(position: SweepPosition): Promise<void>;
  /** Notes that a copy may write the key at the store until `until` (a note of its own, the copy's). */
  expectWrite(write: ExpectedWrite): Promise<void>;
  /**
   * Notes that a write URL may write the key at the store until `until` (the key's one write-URL note, its `until`
   * moved on); with `owner`, the user it is handed to, unless they have `owner.max` other keys with write URLs open
   * (false: nothing noted, the URL is not to be handed out).
   */
  noteWriteUrl(write: ExpectedWrite, owner?: WriteUrlOwner): Promise<boolean>;
  /** The keys noted, each once, with its latest `until`. */
  expectedWrites(): Promise<ExpectedWrite[]>;
  /** Forgets the keys whose URLs expired before `before`. */
  forgetExpectedWrites(before: Date): Promise<void>;
  /** Forgets one copy's note (another note of its key, a write URL's, stays). */
  forgetExpectedWrite(write: ExpectedWrite): Promise<void>;
}

/** The default bucket's per-user folders: `users/{id}/...`. */
const USER_FOLDER = /^users\/([^/]+)\//;

/** Who an object belongs to: the bucket's owner record, or in the default bucket the user of its folder. */
export class ObjectOwners {
  constructor(
    private readonly owners: BucketOwners,
    private readonly defaultBucket: string,
  ) {}

  /** The owner of each key of `bucket`. */
  async of(bucket: string): Promise<(key: string) => string | undefined> {
    if (bucket === this.defaultBucket) return (key) => USER_FOLDER.exec(key)?.[1];
    const owner = await this.owners.ownerOf(bucket);
    return () => owner;
  }

  /** Whether owners are per folder in `bucket` rather than the bucket's. */
  perFolder(bucket: string): boolean {
    return bucket === this.defaultBucket;
  }
}
