/**
 * The platform's one event pattern: a transactional outbox. A service writes
 * an event into its own `outbox_events` table in the same database
 * transaction as the change the event describes; a relay publishes unpublished
 * rows afterwards, with the event's ID as `Nats-Msg-Id`, and marks them
 * published. An event is therefore published exactly when its change commits:
 * a rolled-back change leaves no event, and a crash between commit and publish
 * delays the event (the next relay run, on any instance, sends it) but never
 * loses it. JetStream drops a re-sent ID inside its duplicate window, and
 * consumers de-duplicate by `event_id` beyond it.
 *
 * The table (each service creates it in a migration of its own, with `createOutboxTable`):
 *
 *   CREATE TABLE outbox_events (
 *     id uuid PRIMARY KEY, kind text NOT NULL, payload jsonb NOT NULL, correlation_id text,
 *     created_at timestamptz NOT NULL DEFAULT now(), published_at timestamptz);
 *   CREATE INDEX outbox_events_unpublished ON outbox_events (created_at) WHERE published_at IS NULL;
 *   ALTER TABLE outbox_events ADD COLUMN trace_context jsonb;   -- each service's later migration
 *
 * With tracing on (`telemetry/tracing.ts`), an event keeps the trace context of the request that recorded it
 * (`trace_context`), and the relay publishes it in a producer span of that trace, whose context the message's headers
 * carry to the consumers. Off, the column stays null.
 */
import { randomUUID } from 'node:crypto';
import { type ColumnType, type Kysely, sql, type Transaction } from 'kysely';
import type { Logger } from 'pino';
import { activeTraceContext, inSpanOf } from '../telemetry/tracing.ts';
import type { EventPublisher } from './publisher.ts';

/** Kysely type of the outbox table; a service's database type includes `outbox_events: OutboxEventTable`. */
export interface OutboxEventTable {
  id: string;
  kind: string;
  /** The event's JSON body, written as text. */
  payload: ColumnType<unknown, string, string>;
  correlation_id: string | null;
  /** The W3C trace context (`traceparent`, `tracestate`) of the request that recorded the event; null untraced. */
  trace_context: ColumnType<Record<string, string> | null, string | null | undefined, never>;
  created_at: ColumnType<Date, Date | string | undefined, never>;
  published_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
}

export interface OutboxDatabase {
  outbox_events: OutboxEventTable;
}

/** Something that can run statements on a service database holding the outbox table. */
// biome-ignore lint/suspicious/noExplicitAny: any service database that has the outbox table
type Db<DB = any> = Kysely<DB> | Transaction<DB>;

const asOutbox = (db: Db) => db as unknown as Kysely<OutboxDatabase>;

/** One event to record: its kind (`deposit.confirmed`, `provider.status_changed`) and its data. */
export interface NewEvent {
  kind: string;
  data: object;
  /** Defaults to a new UUID: the event's `event_id` and the message's `Nats-Msg-Id`. */
  id?: string;
  /** When the change happened (defaults to now). */
  occurredAt?: Date | string;
}

/** The JSON body of every published event: its ID, kind and time, then its data. */
export function eventBody(e: NewEvent & { id: string }): Record<string, unknown> {
  const at = e.occurredAt ?? new Date();
  return { event_id: e.id, kind: e.kind, occurred_at: at instanceof Date ? at.toISOString() : at, ...e.data };
}

/**
 * Where domain code records events: inside the transaction of the change. `Outbox.disabled` records nothing,
 * for a service that has no publisher configured (nothing would ever send the rows).
 */
export class Outbox {
  static readonly disabled = new Outbox(false);

  /** Called after `record`, so a relay in this process can publish soon instead of at its next tick. */
  private listener?: () => void;

  constructor(readonly enabled = true) {}

  /** Writes the events in one statement, in the caller's transaction. */
  async record(trx: Db, events: NewEvent[], correlationId?: string): Promise<void> {
    if (!this.enabled || events.length === 0) return;
    // Each event's time is when it was recorded, a microsecond apart within one call, so the relay sends the events
    // of one transaction in the order they were recorded (a transaction's now() would give them all one time).
    const trace = activeTraceContext();
    const rows = events.map((e, i) => {
      const id = e.id ?? randomUUID();
      return {
        id,
        kind: e.kind,
        payload: JSON.stringify(eventBody({ ...e, id })),
        correlation_id: correlationId ?? null,
        ...(trace ? { trace_context: JSON.stringify(trace) } : {}),
        created_at: sql<Date>`clock_timestamp() + ${i} * interval '1 microsecond'`,
      };
    });
    await asOutbox(trx).insertInto('outbox_events').values(rows).execute();
    this.listener?.();
  }

  /** Lets a relay hear of new events (it still publishes only what has committed). */
  onRecord(listener: () => void): void {
    this.listener = listener;
  }
}

export interface OutboxRelayOptions {
  /** Subject of an event: a prefix (`billing.events` + `.` + kind) or a function of the kind. */
  subject: string | ((kind: string) => string);
  logger: Logger;
  /** Most events published by one run (default 100). */
  batch?: number;
  /** How long published events are kept before being deleted (default 1 day; 0 keeps them). */
  retentionMs?: number;
  /**
   * How long publishing may keep failing before it is a warning (default 30 s): until then each failure is logged at
   * debug and retried quietly. A receiver that is not up yet when its sender starts (`pnpm start` starts every service
   * at once: billing's first price card can go out before auth gives it a token, or before the registry listens) is
   * no failure of anyone's; one still down after this is.
   */
  quietMs?: number;
  /** The clock the failure timing reads (default `Date.now`). */
  now?: () => number;
}

/** Publishes the outbox; several instances may run at once (rows are claimed with SKIP LOCKED). */
export class OutboxRelay {
  private timer?: NodeJS.Timeout;
  private soon?: NodeJS.Timeout;
  private running?: Promise<number>;
  private lastPurge = 0;
  private stopped = false;
  /** When the publishes failing now began to fail (none failing: undefined), and when that was last warned of. */
  private failingSince?: number;
  private warnedAt?: number;
  private readonly subjectOf: (kind: string) => string;
  private readonly now: () => number;

  constructor(
    private readonly db: Kysely<OutboxDatabase> | Db,
    private readonly publisher: EventPublisher,
    private readonly opts: OutboxRelayOptions,
  ) {
    const { subject } = opts;
    this.subjectOf = typeof subject === 'string' ? (kind) => `${subject}.${kind}` : subject;
    this.now = opts.now ?? Date.now;
  }

  /** Publishes unpublished events, oldest first, until none are left; resolves with how many went out. */
  async flush(): Promise<number> {
    let total = 0;
    for (;;) {
      const sent = await this.flushBatch();
      total += sent;
      if (sent < (this.opts.batch ?? 100)) return total;
    }
  }

  /** One run: up to `batch` events (one run at a time per relay). */
  private flushBatch(): Promise<number> {
    this.running ??= this.publishBatch().finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  private async publishBatch(): Promise<number> {
    const db = asOutbox(this.db);
    const sent = await db.transaction().execute(async (trx) => {
      const rows = await trx
        .selectFrom('outbox_events')
        .select(['id', 'kind', 'payload', 'correlation_id', 'trace_context'])
        .where('published_at', 'is', null)
        .orderBy('created_at')
        .orderBy('id')
        .limit(this.opts.batch ?? 100)
        .forUpdate()
        .skipLocked()
        .execute();
      const done: string[] = [];
      for (const row of rows) {
        try {
          const subject = this.subjectOf(row.kind);
          // In the recording request's trace, when it had one: the message's headers carry the producer span on.
          await inSpanOf(
            row.trace_context ?? undefined,
            `publish ${subject}`,
            {
              kind: 'producer',
              tracer: 'outbox-relay',
              attributes: { 'messaging.destination.name': subject, event_id: row.id },
            },
            () =>
              this.publisher.publish(subject, row.payload, {
                msgId: row.id,
                correlationId: row.correlation_id ?? undefined,
              }),
          );
          done.push(row.id);
          this.published();
        } catch (err) {
          this.failed(err as Error, row.id);
          break;
        }
      }
      if (done.length > 0) {
        await trx.updateTable('outbox_events').set({ published_at: new Date() }).where('id', 'in', done).execute();
      }
      return done.length;
    });
    await this.purge();
    return sent;
  }

  /**
   * A publish that failed: at debug while publishing has failed for less than `quietMs`, then a warning that says for
   * how long, once each `quietMs` while it goes on failing (the relay tries every second).
   */
  private failed(err: Error, eventId: string): void {
    const now = this.now();
    this.failingSince ??= now;
    const quietMs = this.opts.quietMs ?? 30_000;
    const failingMs = now - this.failingSince;
    const line = { err: err.message, event_id: eventId, failing_for_ms: failingMs };
    if (failingMs < quietMs || (this.warnedAt !== undefined && now - this.warnedAt < quietMs)) {
      this.opts.logger.debug(line, 'event publish failed; will retry');
      return;
    }
    this.warnedAt = now;
    this.opts.logger.warn(line, `event publish failing for ${Math.round(failingMs / 1000)} s; will retry`);
  }

  /** A publish that went out: publishing works (again), which is said when its failures were warned of. */
  private published(): void {
    if (this.warnedAt !== undefined) {
      this.opts.logger.info(
        { failed_for_ms: this.now() - (this.failingSince ?? this.now()) },
        'event publishing works again',
      );
    }
    this.failingSince = undefined;
    this.warnedAt = undefined;
  }

  /** Deletes published events past the retention, at most once a minute. */
  private async purge(): Promise<void> {
    const retention = this.opts.retentionMs ?? 24 * 3600_000;
    if (retention <= 0 || Date.now() - this.lastPurge < 60_000) return;
    this.lastPurge = Date.now();
    await asOutbox(this.db)
      .deleteFrom('outbox_events')
      .where('published_at', '<', new Date(Date.now() - retention))
      .execute();
  }

  /** Publishes every `intervalMs`, and soon after `outbox` records an event in this process. */
  start(intervalMs: number, outbox?: Outbox): void {
    const run = () => {
      if (this.stopped) return;
      this.flush().catch((err) => this.opts.logger.warn({ err: (err as Error).message }, 'outbox flush failed'));
    };
    this.timer = setInterval(run, intervalMs);
    this.timer.unref();
    outbox?.onRecord(() => {
      // The recording transaction has not committed yet: look shortly after, coalescing a burst into one run.
      this.soon ??= setTimeout(() => {
        this.soon = undefined;
        run();
      }, 20);
      this.soon.unref();
    });
  }

  /** Stops the timers and waits for a run in progress. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    clearTimeout(this.soon);
    await this.running?.catch(() => {});
  }
}
