/**
 * Payment events through a transactional outbox: an event is written in the
 * same database transaction as the change it describes, and the relay
 * publishes it afterwards on `<prefix>.<kind>` (NATS `billing.events.*`)
 * with the event's ID as `Nats-Msg-Id`, so a crash between commit and publish
 * delays an event but never loses or invents one.
 */
import { randomUUID } from 'node:crypto';
import type { EventPublisher, Logger } from '@gpu/common';
import type { Kysely, Transaction } from 'kysely';
import type { BillingDB } from '../db/schema.ts';

/** Kinds published by Billing I. */
export type PaymentEventKind =
  | 'deposit.confirmed'
  | 'deposit.rejected'
  | 'withdrawal.pending'
  | 'withdrawal.confirmed'
  | 'withdrawal.failed'
  | 'payout.pending'
  | 'payout.confirmed'
  | 'payout.failed';

/** Records events inside a database transaction. */
export interface EventSink {
  record(
    trx: Transaction<BillingDB> | Kysely<BillingDB>,
    kind: string,
    data: object,
    correlationId?: string,
  ): Promise<void>;
}

/** Drops events (no NATS configured). */
export const noEvents: EventSink = { record: async () => {} };

/** Writes events into the outbox table. */
export const outboxSink: EventSink = {
  async record(trx, kind, data, correlationId) {
    const id = randomUUID();
    const payload = { event_id: id, kind, occurred_at: new Date().toISOString(), ...data };
    await trx
      .insertInto('outbox_events')
      .values({ id, kind, payload: JSON.stringify(payload), correlation_id: correlationId ?? null })
      .execute();
  },
};

/** Publishes outbox events; several instances may run (rows are claimed with SKIP LOCKED). */
export class OutboxRelay {
  private timer?: NodeJS.Timeout;
  private running?: Promise<number>;

  constructor(
    private readonly db: Kysely<BillingDB>,
    private readonly publisher: EventPublisher,
    private readonly subjectPrefix: string,
    private readonly logger: Logger,
  ) {}

  /** Publishes up to `batch` unpublished events; resolves with how many went out. */
  flush(batch = 100): Promise<number> {
    this.running ??= this.flushOnce(batch).finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  private async flushOnce(batch: number): Promise<number> {
    return this.db.transaction().execute(async (trx) => {
      const rows = await trx
        .selectFrom('outbox_events')
        .selectAll()
        .where('published_at', 'is', null)
        .orderBy('created_at')
        .limit(batch)
        .forUpdate()
        .skipLocked()
        .execute();
      const done: string[] = [];
      for (const row of rows) {
        try {
          await this.publisher.publish(`${this.subjectPrefix}.${row.kind}`, row.payload, {
            msgId: row.id,
            correlationId: row.correlation_id ?? undefined,
          });
          done.push(row.id);
        } catch (err) {
          this.logger.warn({ err: (err as Error).message, event_id: row.id }, 'event publish failed; will retry');
          break;
        }
      }
      if (done.length > 0) {
        await trx.updateTable('outbox_events').set({ published_at: new Date() }).where('id', 'in', done).execute();
      }
      return done.length;
    });
  }

  /** Flushes every `intervalMs` until stopped. */
  start(intervalMs: number): void {
    this.timer = setInterval(() => {
      this.flush().catch((err) => this.logger.warn({ err: (err as Error).message }, 'outbox flush failed'));
    }, intervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.running?.catch(() => {});
  }
}
