/**
 * Stored bytes, measured for billing. Once per period (`metering.interval`, periods starting at its multiples since
 * the epoch, UTC, so every instance's agree), the meter adds up what each owner stores: every object of the buckets
 * they own (the owner records), and every object under their folder of the default bucket (`users/{id}/`). Buckets
 * without an owner record (made outside the platform) are nobody's and billed to nobody. Each owner's bytes are
 * reported to billing for the period just ended: bytes × the period's length is what billing charges, so an object
 * is billed for the periods it was there when they ended.
 *
 * Billing charges a user's period exactly once (a report of a period charged already answers that charge), so
 * several instances metering the same store, and retries, charge nothing twice. A report that fails for a while
 * (billing down) is kept and sent again at the next tick, up to `MAX_PENDING`; a period no instance measured (all
 * of them down across its end) is not billed.
 */
import type { Logger } from '@gpu/common';
import type { BucketOwners } from './bucket-owners.ts';
import type { ObjectStore } from './store.ts';

/** One owner's bytes over one period, as billing charges it. */
export interface StorageUsage {
  userId: string;
  periodStart: Date;
  periodEnd: Date;
  bytes: number;
}

/** Where usage goes: billing. Throws when the report may succeed later (billing unreachable); resolves otherwise. */
export interface UsageSink {
  report(usage: StorageUsage): Promise<void>;
}

/** Reports kept for another try, at most (a day of hourly periods for some 400 owners). */
const MAX_PENDING = 10_000;
const PAGE = 1000;
const USER_FOLDER = /^users\/([^/]+)\//;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Every object of `bucket` under `prefix`, a page at a time. */
async function* objectsOf(store: ObjectStore, bucket: string, prefix = '') {
  let token: string | undefined;
  do {
    const page = await store.listPage({ bucket, prefix, oneLevel: false, token, maxKeys: PAGE });
    yield* page.objects;
    token = page.nextToken;
  } while (token);
}

/** Bytes stored per owner now: their buckets and their folders of the default bucket. */
async function measureStorage(
  store: ObjectStore,
  owners: BucketOwners,
  defaultBucket: string,
): Promise<Map<string, number>> {
  const bytes = new Map<string, number>();
  const add = (owner: string, size: number) => bytes.set(owner, (bytes.get(owner) ?? 0) + size);
  for (const bucket of await owners.ownedBuckets()) {
    if (bucket === defaultBucket || bucket === owners.recordsBucket) continue;
    const owner = await owners.ownerOf(bucket);
    if (owner === undefined) continue;
    try {
      for await (const o of objectsOf(store, bucket)) add(owner, o.size);
    } catch (err) {
      // A bucket deleted at the store since: nothing stored there.
      if ((err as { code?: string }).code !== 'BUCKET_NOT_FOUND') throw err;
    }
  }
  if (defaultBucket) {
    try {
      for await (const o of objectsOf(store, defaultBucket, 'users/')) {
        const owner = USER_FOLDER.exec(o.key)?.[1];
        if (owner) add(owner, o.size);
      }
    } catch (err) {
      if ((err as { code?: string }).code !== 'BUCKET_NOT_FOUND') throw err;
    }
  }
  return bytes;
}

/** The period of `intervalMs` that ended last at `now`: `[end - interval, end)`, `end` a multiple of the interval. */
export function periodEndedBy(now: number, intervalMs: number): { start: Date; end: Date } {
  const end = Math.floor(now / intervalMs) * intervalMs;
  return { start: new Date(end - intervalMs), end: new Date(end) };
}

export interface MeterOptions {
  store: ObjectStore;
  owners: BucketOwners;
  defaultBucket: string;
  sink: UsageSink;
  intervalMs: number;
  logger: Logger;
  now?: () => number;
}

export class StorageMeter {
  private timer?: NodeJS.Timeout;
  private running?: Promise<unknown>;
  private pending: StorageUsage[] = [];
  private readonly now: () => number;

  constructor(private readonly opts: MeterOptions) {
    this.now = opts.now ?? Date.now;
  }

  /** Measures the period that ended last now (at start-up too: a repeat charges nothing), then at each period's end. */
  start(): void {
    if (this.timer !== undefined || this.opts.intervalMs <= 0) return;
    const tick = () => {
      this.running ??= this.meter().finally(() => {
        this.running = undefined;
      });
      // A little after the boundary, so every instance's clock agrees which period ended.
      const wait = this.opts.intervalMs - (this.now() % this.opts.intervalMs) + 1000;
      this.timer = setTimeout(tick, wait);
      this.timer.unref();
    };
    tick();
  }

  /**
   * Measures now and reports the period that ended last; reports left from earlier tries go first. What was sent;
   * failures are logged and kept for the next tick.
   */
  async meter(): Promise<{ reported: number; failed: number }> {
    const { start, end } = periodEndedBy(this.now(), this.opts.intervalMs);
    let measured: Map<string, number>;
    try {
      measured = await measureStorage(this.opts.store, this.opts.owners, this.opts.defaultBucket);
    } catch (err) {
      this.opts.logger.warn({ err: (err as Error).message }, 'measuring storage failed; trying at the next period');
      measured = new Map();
    }
    const due = this.pending.splice(0);
    for (const [userId, bytes] of measured) {
      // Billing knows users by their IDs; an owner that is no user ID (a bucket record written by hand) is skipped.
      if (bytes > 0 && UUID.test(userId)) due.push({ userId, periodStart: start, periodEnd: end, bytes });
    }
    let reported = 0;
    for (const usage of due) {
      try {
        await this.opts.sink.report(usage);
        reported++;
      } catch (err) {
        if (this.pending.length < MAX_PENDING) this.pending.push(usage);
        this.opts.logger.warn(
          { err: (err as Error).message, user_id: usage.userId, period_start: usage.periodStart.toISOString() },
          'storage usage report failed; sending it again at the next period',
        );
      }
    }
    const failed = due.length - reported;
    if (due.length > 0) {
      this.opts.logger.info({ reported, failed, period_start: start.toISOString() }, 'storage usage reported');
    }
    return { reported, failed };
  }

  async stop(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    await this.running;
  }
}
