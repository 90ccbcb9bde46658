/**
 * Stored bytes, measured for billing. Once per period (`metering.interval`, periods starting at its multiples since
 * the epoch, UTC, so every instance's agree), the meter adds up what each owner stores, from the object catalog's
 * owners (`catalog/`): every object of the buckets they own (the owner records), and every object under their folder
 * of the default bucket (`users/{id}/`); and the parts of their open resumable uploads (`withOpenUploads`). Buckets
 * without an owner record (made outside the platform) are nobody's and billed to nobody. The catalog follows the store within `reconcile_interval` for what was written behind the
 * service's back; what went through the service is in it at once. Each owner's bytes are
 * reported to billing for the period just ended: bytes × the period's length is what billing charges, so an object
 * is billed for the periods it was there when they ended.
 *
 * One instance measures each period: before listing anything, an instance claims the period with a marker object in
 * the owner records' bucket (`.metering/<period end>`, holding its instance ID), written only when none exists
 * (`If-None-Match: *`) and read back; the others see another instance's marker and only send what they kept. The two
 * markers before it are deleted as a claim is made, so the markers stay few. On a store without conditional writes
 * (s3rver) two instances racing for one period may both measure it: billing charges a user's period exactly once (a
 * report of a period charged already answers that charge), so that, and retries, charge nothing twice. A report that fails for a while
 * (billing down) is kept and sent again at the next tick, up to `MAX_PENDING`; a period no instance measured (all
 * of them down across its end) is not billed.
 */
import { randomUUID } from 'node:crypto';
import { isUuid, type Logger } from '@gpu/common';
import { type ObjectStore, readJson, writeJsonOnce } from './store.ts';

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

/** What each owner stores now, in bytes: the object catalog's sums (`catalog/`). */
interface UsageSource {
  usageByOwner(): Promise<Map<string, number>>;
}

/**
 * What each owner stores: the catalog's objects, and the parts of their open resumable uploads (the store holds them
 * as much; `Uploads.heldBytesByOwner`).
 */
export function withOpenUploads(
  catalog: UsageSource,
  uploads: { heldBytesByOwner(): Promise<Map<string, number>> },
  logger: Logger,
): UsageSource {
  return {
    async usageByOwner() {
      // A store that cannot list the parts now costs the period their bytes, never the objects' (the catalog's).
      const held = uploads.heldBytesByOwner().catch((err: unknown) => {
        logger.warn({ err: (err as Error).message }, "open uploads' parts could not be measured; objects alone");
        return new Map<string, number>();
      });
      const [objects, parts] = await Promise.all([catalog.usageByOwner(), held]);
      const total = new Map(objects);
      for (const [owner, bytes] of parts) total.set(owner, (total.get(owner) ?? 0) + bytes);
      return total;
    },
  };
}

/** The period of `intervalMs` that ended last at `now`: `[end - interval, end)`, `end` a multiple of the interval. */
export function periodEndedBy(now: number, intervalMs: number): { start: Date; end: Date } {
  const end = Math.floor(now / intervalMs) * intervalMs;
  return { start: new Date(end - intervalMs), end: new Date(end) };
}

/** Where the period markers live, under the owner records' bucket (no bucket name has a `/`). */
export const METERING_MARKERS = '.metering/';

/** Which instance measures a period: the one whose marker object is there. */
export class PeriodClaims {
  constructor(
    private readonly store: ObjectStore,
    private readonly bucket: string,
    /** This instance's ID (a random one when the configuration names none). */
    readonly instanceId: string = randomUUID(),
  ) {}

  /** Whether this instance measures the period ending at `end` (it claimed it, now or before). */
  async claim(end: Date, intervalMs: number): Promise<boolean> {
    const key = `${METERING_MARKERS}${end.toISOString()}`;
    const holder = await this.holder(key);
    if (holder !== undefined) return holder === this.instanceId;
    await writeJsonOnce(this.store, this.bucket, key, { instance_id: this.instanceId });
    for (const back of [2, 3]) {
      const old = `${METERING_MARKERS}${new Date(end.getTime() - back * intervalMs).toISOString()}`;
      await this.store.delete(this.bucket, old).catch(() => {});
    }
    return (await this.holder(key)) === this.instanceId;
  }

  private async holder(key: string): Promise<string | undefined> {
    const marker = (await readJson(this.store, this.bucket, key)) as { instance_id?: unknown } | undefined;
    if (marker === undefined) return undefined;
    return typeof marker.instance_id === 'string' ? marker.instance_id : '';
  }
}

export interface MeterOptions {
  usage: UsageSource;
  sink: UsageSink;
  intervalMs: number;
  logger: Logger;
  /** Which instance measures a period; without, this one measures every period. */
  claims?: PeriodClaims;
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
    let measured = new Map<string, number>();
    try {
      if (!this.opts.claims || (await this.opts.claims.claim(end, this.opts.intervalMs))) {
        measured = await this.opts.usage.usageByOwner();
      }
    } catch (err) {
      this.opts.logger.warn({ err: (err as Error).message }, 'measuring storage failed; trying at the next period');
      measured = new Map();
    }
    const due = this.pending.splice(0);
    for (const [userId, bytes] of measured) {
      // Billing knows users by their IDs; an owner that is no user ID (a bucket record written by hand) is skipped.
      if (bytes > 0 && isUuid(userId)) due.push({ userId, periodStart: start, periodEnd: end, bytes });
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
