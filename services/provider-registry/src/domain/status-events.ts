/**
 * Status change events on NATS (`registry.providers.status` by default).
 * Publishing never fails the request that caused the change (the change is
 * already committed): it runs in the background, failures are logged, and
 * `flush()` waits for what is in flight (graceful shutdown, tests).
 */
import { randomUUID } from 'node:crypto';
import type { EventPublisher, Logger } from '@gpu/common';
import type { StatusChange } from './provider.ts';

/** The JSON body of a status event. */
export interface StatusEvent extends StatusChange {
  event_id: string;
  type: 'provider.status_changed';
}

export class StatusEvents {
  private readonly pending = new Set<Promise<void>>();

  constructor(
    private readonly publisher: EventPublisher,
    private readonly subject: string,
    private readonly logger: Logger,
  ) {}

  /** Queues one event per change; `previous_status === status` changes are not events and are skipped. */
  emit(changes: StatusChange[], correlationId?: string): void {
    if (!this.publisher.enabled) return;
    for (const change of changes) {
      if (change.previous_status === change.status) continue;
      const event: StatusEvent = { event_id: randomUUID(), type: 'provider.status_changed', ...change };
      const p = this.publisher
        .publish(this.subject, event, { msgId: event.event_id, correlationId })
        .then(
          () => undefined,
          (err: unknown) => {
            this.logger.error(
              { err, provider_id: change.provider_id, status: change.status },
              'status event could not be published',
            );
          },
        )
        .finally(() => this.pending.delete(p));
      this.pending.add(p);
    }
  }

  /** Resolves when every queued event was published or failed. */
  async flush(): Promise<void> {
    while (this.pending.size > 0) await Promise.all([...this.pending]);
  }
}
