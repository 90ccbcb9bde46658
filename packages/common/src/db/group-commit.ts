/**
 * Group commit: many small writes that arrive at once are applied in few
 * database transactions instead of one each. Submitted items queue while
 * `maxInFlight` batches are running (`maxInFlightFull` when the next is full);
 * whenever a batch finishes, everything queued (up to `maxBatch`) goes out as
 * the next batch. With a free slot, a
 * batch leaves on the next turn of the event loop (`setImmediate`), taking
 * whatever the current turn's I/O callbacks submitted, so batching adds next to
 * no waiting when the load is light and grows the batches as fast as the load.
 *
 * A read that someone waits for can `hold` the next batch back: while it runs,
 * the queued items wait (at most `maxHoldMs`, or until a full batch is queued)
 * rather than leave as a statement that competes with the read for the
 * database's CPU. Writes whose answer nobody waits on (a heartbeat) lose a few
 * milliseconds; the read, which a person or a scheduler waits on, does not
 * share the machine with them meanwhile (and the held items leave as one larger,
 * cheaper batch).
 *
 * The batch function answers one result per item, in order: a value, or an
 * Error for that item alone. A batch function that throws fails every item of
 * its batch with that error. `stats` counts batches and items, so a caller (a
 * test, a benchmark) can see how well items are being grouped.
 */

import { AppError } from '../errors.ts';

export interface GroupCommitOptions {
  /** Most items in one batch (default 256). */
  maxBatch?: number;
  /** Most batches running at once (default 2: one being applied while the next one's rows travel). */
  maxInFlight?: number;
  /**
   * Most batches running at once when the next one is full (`maxBatch` items; default `maxInFlight`): a backlog keeps
   * more batches in flight, so the database works on some while the caller prepares others, while a light load still
   * leaves in few batches as large as it makes them.
   */
  maxInFlightFull?: number;
  /**
   * Most items waiting for a batch (default: no limit). One more is refused at once with 503 OVERLOADED rather
   * than queued behind a database that does not keep up (or does not answer).
   */
  maxQueued?: number;
  /** Longest a `hold` keeps queued items back, in milliseconds (default 50); a full batch leaves at once regardless. */
  maxHoldMs?: number;
}

/** What a GroupCommit has sent so far. */
export interface GroupCommitStats {
  /** Batches handed to the batch function. */
  batches: number;
  /** Items in those batches. */
  items: number;
  /** The largest batch so far. */
  largestBatch: number;
  /** Batches that a `hold` kept back before they left. */
  held: number;
}

/** Where an item's result goes: its own promise (`submit`), or its place among several (`submitAll`). */
interface Receiver<O> {
  resolve(index: number, value: O): void;
  reject(index: number, err: unknown): void;
}

/**
 * An item waiting for its batch, with where its result goes. No closure per item: under tsx (how the services run),
 * every named closure costs a `__name` call that redefines the function's name, some 20x its own making.
 */
interface Pending<I, O> {
  item: I;
  index: number;
  to: Receiver<O>;
}

/** `submit`'s receiver: the item's promise. */
class OneResult<O> implements Receiver<O> {
  constructor(
    private readonly onValue: (value: O) => void,
    private readonly onError: (err: unknown) => void,
  ) {}
  resolve(_index: number, value: O): void {
    this.onValue(value);
  }
  reject(_index: number, err: unknown): void {
    this.onError(err);
  }
}

/** `submitAll`'s receiver: one result per item in its place, handed over once the last one is in. */
class AllResults<O> implements Receiver<O> {
  private left: number;
  readonly results: (O | Error)[];
  constructor(
    size: number,
    private readonly done: (results: (O | Error)[]) => void,
  ) {
    this.left = size;
    this.results = new Array(size);
    if (size === 0) done(this.results);
  }
  resolve(index: number, value: O | Error): void {
    this.results[index] = value;
    if (--this.left === 0) this.done(this.results);
  }
  reject(index: number, err: unknown): void {
    this.resolve(index, err instanceof Error ? err : new Error(String(err)));
  }
}

export class GroupCommit<I, O> {
  private readonly queue: Pending<I, O>[] = [];
  private inFlight = 0;
  private scheduled = false;
  private readonly maxBatch: number;
  private readonly maxInFlight: number;
  private readonly maxInFlightFull: number;
  private readonly maxQueued: number;
  private readonly maxHoldMs: number;
  private readonly counts: GroupCommitStats = { batches: 0, items: 0, largestBatch: 0, held: 0 };
  private overload: AppError | undefined;
  /** Holds taken and not yet released. */
  private holds = 0;
  /** When a hold first kept the queued items back (undefined: none has since the last batch left). */
  private heldSince: number | undefined;
  /** Lets the held items go once they have waited `maxHoldMs`. */
  private holdTimer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly runBatch: (items: I[]) => Promise<(O | Error)[]>,
    options: GroupCommitOptions = {},
  ) {
    this.maxBatch = Math.max(1, options.maxBatch ?? 256);
    this.maxInFlight = Math.max(1, options.maxInFlight ?? 2);
    this.maxInFlightFull = Math.max(this.maxInFlight, options.maxInFlightFull ?? this.maxInFlight);
    this.maxQueued = options.maxQueued ?? Number.POSITIVE_INFINITY;
    this.maxHoldMs = Math.max(0, options.maxHoldMs ?? 50);
  }

  /** Batches and items sent so far (a copy). */
  get stats(): GroupCommitStats {
    return { ...this.counts };
  }

  /** Queues one item; resolves with its result or rejects with its error. */
  submit(item: I): Promise<O> {
    if (this.queue.length >= this.maxQueued) return Promise.reject(this.overloaded());
    return new Promise<O>((resolve, reject) => {
      this.queue.push({ item, index: 0, to: new OneResult(resolve, reject) });
      this.schedule();
    });
  }

  /**
   * Queues several items at once (a turn's messages, a request's batch): resolves, once every one has its result,
   * with one per item in order: its value or its Error (a full queue's OVERLOADED for those it had no room for). It
   * never rejects, and costs no promise per item.
   */
  submitAll(items: I[]): Promise<(O | Error)[]> {
    return new Promise((resolve) => {
      const to = new AllResults<O>(items.length, resolve);
      items.forEach((item, index) => {
        if (this.queue.length >= this.maxQueued) to.resolve(index, this.overloaded());
        else this.queue.push({ item, index, to });
      });
      this.schedule();
    });
  }

  /**
   * The error of a full queue: one made for all (shedding load must cost next to nothing: a new error each time, with
   * its stack, cost more than the work it refused).
   */
  private overloaded(): AppError {
    this.overload ??= new AppError(
      'unavailable',
      'OVERLOADED',
      `${this.maxQueued} writes are waiting already: try again shortly`,
      { headers: { 'retry-after': '1' } },
    );
    return this.overload;
  }

  /**
   * Keeps the next batch back until the returned release is called (once; more calls do nothing): for a read that
   * someone waits for, so that its statement does not share the database's CPU with a batch that could as well leave
   * a few milliseconds later. The queued items leave anyway once they fill a batch or have been kept `maxHoldMs`;
   * batches already running go on.
   */
  hold(): () => void {
    this.holds++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.holds--;
      this.schedule();
    };
  }

  /**
   * Whether another batch may leave now: a free slot (or a free slot for full batches and a full one waiting), and no
   * hold keeping the queued items back.
   */
  private mayStart(): boolean {
    if (this.queue.length === 0) return false;
    const slot =
      this.inFlight < this.maxInFlight || (this.inFlight < this.maxInFlightFull && this.queue.length >= this.maxBatch);
    return slot && !this.heldBack();
  }

  /**
   * Whether a hold keeps the queued items back now: some hold is taken, they fill no batch, and they have been kept
   * less than `maxHoldMs` (counted from when a hold first kept them; a timer lets them go then).
   */
  private heldBack(): boolean {
    if (this.holds === 0 || this.queue.length >= this.maxBatch) return false;
    const now = performance.now();
    const since = this.heldSince ?? now;
    const left = since + this.maxHoldMs - now;
    if (left <= 0) return false;
    // Marked only once the hold keeps them (with `maxHoldMs` 0 it never does: no batch is counted as held).
    this.heldSince = since;
    this.holdTimer ??= setTimeout(() => {
      this.holdTimer = undefined;
      this.pump();
    }, Math.ceil(left));
    return true;
  }

  private schedule(): void {
    if (this.scheduled || !this.mayStart()) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.pump();
    });
  }

  private pump(): void {
    while (this.mayStart()) {
      const batch = this.queue.splice(0, this.maxBatch);
      if (this.heldSince !== undefined) {
        this.counts.held++;
        this.heldSince = undefined;
        clearTimeout(this.holdTimer);
        this.holdTimer = undefined;
      }
      this.inFlight++;
      this.counts.batches++;
      this.counts.items += batch.length;
      this.counts.largestBatch = Math.max(this.counts.largestBatch, batch.length);
      void this.run(batch).finally(() => {
        this.inFlight--;
        this.pump();
      });
    }
  }

  private async run(batch: Pending<I, O>[]): Promise<void> {
    let results: (O | Error)[];
    try {
      results = await this.runBatch(batch.map((p) => p.item));
      if (results.length !== batch.length) {
        throw new Error(`batch answered ${results.length} results for ${batch.length} items`);
      }
    } catch (err) {
      for (const p of batch) p.to.reject(p.index, err);
      return;
    }
    batch.forEach((p, i) => {
      const r = results[i] as O | Error;
      if (r instanceof Error) p.to.reject(p.index, r);
      else p.to.resolve(p.index, r);
    });
  }
}
