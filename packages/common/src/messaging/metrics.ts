/**
 * What an operator watches of a service's messaging, the same in every service that publishes: whether its NATS
 * connection is up (`nats_connected`), and its outbox's backlog (`<prefix>_outbox_backlog`: events recorded, not yet
 * published; `<prefix>_outbox_oldest_seconds`: the age of the oldest). The alert rules (deploy/prometheus/alerts.yml)
 * name them.
 */
import { type Kysely, sql } from 'kysely';
import type { Logger } from 'pino';
import { Gauge } from 'prom-client';
import { databaseGauge } from '../db/metric-read.ts';
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
 * is shared (rules take the `max`). Each read is bounded (db/metric-read.ts).
 */
export function outboxMetrics<DB>(prefix: string, db: Kysely<DB>, logger: Logger): Gauge[] {
  return [
    databaseGauge({
      name: `${prefix}_outbox_backlog`,
      help: 'events recorded but not yet published',
      db,
      logger,
      query: sql`SELECT count(*) AS n FROM outbox_events WHERE published_at IS NULL`,
    }),
    databaseGauge({
      name: `${prefix}_outbox_oldest_seconds`,
      help: 'age of the oldest event not yet published (0: none)',
      db,
      logger,
      query: sql`SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0) AS n FROM outbox_events
                 WHERE published_at IS NULL`,
    }),
  ];
}
