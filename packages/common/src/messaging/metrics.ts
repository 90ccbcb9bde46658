/**
 * What an operator watches of a service's messaging, the same in every service that publishes: whether its NATS
 * connection is up (`nats_connected`), and its outbox's backlog (`<prefix>_outbox_backlog`: events recorded, not yet
 * published; `<prefix>_outbox_oldest_seconds`: the age of the oldest). The alert rules (deploy/prometheus/alerts.yml)
 * name them.
 */
import { type QueryExecutorProvider, sql } from 'kysely';
import type { Logger } from 'pino';
import { Gauge } from 'prom-client';
import type { NatsPublisher } from './publisher.ts';

/**
 * `nats_connected`: 1 while this instance's NATS connection is up, 0 from a disconnect until the client has
 * reconnected. Read from the client's own state, so a scrape never waits on NATS.
 */
export function natsConnectedGauge(publisher: Pick<NatsPublisher, 'connected'>): Gauge {
  return new Gauge({
    name: 'nats_connected',
    help: "whether this instance's NATS connection is up (1) or lost while the client reconnects (0)",
    registers: [],
    collect() {
      this.set(publisher.connected ? 1 : 0);
    },
  });
}

/**
 * `<prefix>_outbox_backlog` and `<prefix>_outbox_oldest_seconds` (0: none), counted in the service's database when
 * Prometheus scrapes (a database holding `outbox_events`): the same for every instance of the service, as the outbox
 * is shared (rules take the `max`).
 */
export function outboxMetrics(prefix: string, db: QueryExecutorProvider, logger: Logger): Gauge[] {
  const fromDb = (name: string, help: string, query: ReturnType<typeof sql<{ n: string | number | null }>>) =>
    new Gauge({
      name,
      help,
      registers: [],
      async collect() {
        try {
          this.set(Number((await query.execute(db)).rows[0]?.n ?? 0));
        } catch (err) {
          logger.warn({ err: (err as Error).message, metric: name }, 'reading a metric failed');
        }
      },
    });
  return [
    fromDb(
      `${prefix}_outbox_backlog`,
      'events recorded but not yet published',
      sql`SELECT count(*) AS n FROM outbox_events WHERE published_at IS NULL`,
    ),
    fromDb(
      `${prefix}_outbox_oldest_seconds`,
      'age of the oldest event not yet published (0: none)',
      sql`SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0) AS n FROM outbox_events WHERE published_at IS NULL`,
    ),
  ];
}
