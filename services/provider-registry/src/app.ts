/**
 * buildApp(deps): the provider registry's HTTP wiring. Never listens; tests
 * inject or listen on port 0 themselves.
 */

import {
  type App,
  accessVerifier,
  consumerPendingGauge,
  createApp,
  type Database,
  type DurableConsumer,
  durationMs,
  type EventPublisher,
  inboxRoute,
  type Logger,
  NatsPublisher,
  natsConnectedGauge,
  OutboxRelay,
  outboxMetrics,
  type TokenVerifier,
  trustsSubjects,
} from '@gpu/common';
import { billingMessages, startBillingConsumers } from './adapters/billing-messages.ts';
import {
  type HeartbeatSubscriber,
  heartbeatRejectionCounter,
  startHeartbeatSubscriber,
} from './adapters/heartbeat-subscriber.ts';
import { fleetMetric, heartbeatBatchMetrics } from './adapters/ops-metrics.ts';
import { offlineAfterMs, type RegistryConfig } from './config.ts';
import type { RegistryDB } from './db/schema.ts';
import { SESSION_REPORTING_ROLES } from './domain/access.ts';
import { GpuHolds } from './domain/gpu-holds.ts';
import { Market } from './domain/market.ts';
import { PeriodicTask } from './domain/periodic-task.ts';
import { RegistryService } from './domain/registry-service.ts';
import { StatusOutbox } from './domain/status-events.ts';
import { heartbeatRoute } from './routes/heartbeat.ts';
import { JsonArraySender } from './routes/json-array.ts';
import { offerRoutes } from './routes/offers.ts';
import type { ProviderRoutesOptions } from './routes/options.ts';
import { providerRoutes } from './routes/providers.ts';
import { schemas } from './routes/schemas.ts';

export const SERVICE_NAME = 'provider-registry';

/**
 * How often the outbox relay looks for unpublished events besides being woken by this instance's own changes
 * (events recorded by other instances, or left by a crash or a NATS outage).
 */
const RELAY_INTERVAL_MS = 1000;

/** How often each instance deletes the counted session ends past `sessions.retention`. */
const SESSION_PURGE_INTERVAL_MS = 3_600_000;

export interface RegistryDeps {
  config: RegistryConfig;
  logger: Logger;
  database: Database<RegistryDB>;
  /** Publishes status events; a disabled (no-op) publisher records none. */
  publisher: EventPublisher;
  /** Verifies access tokens; built from `config.access` (the auth service's JWKS) when absent. */
  verifier?: TokenVerifier;
  /** Run the periodic offline sweep (default true; tests drive `registry.sweepOffline()` themselves). */
  sweeper?: boolean;
  /**
   * Consume billing's session events from NATS (`messaging.subjects.billing_events`, durable
   * `messaging.session_consumer`) to show rented providers busy; needs a NATS publisher. Off by default: the server
   * turns it on, tests that use it name subjects of their own.
   */
  consumeSessionEvents?: boolean;
  /**
   * Take heartbeats from NATS (`messaging.subjects.heartbeats`, queue group `provider-registry`:
   * `adapters/heartbeat-subscriber.ts`); needs a NATS publisher. Off by default: the server turns it on, tests that
   * use it name a subject of their own.
   */
  takeHeartbeats?: boolean;
  /** The most NATS heartbeats one daemon client has in hand at once (the subscriber's default; tests set fewer). */
  heartbeatsPerClient?: number;
  /** Close the publisher and the database when the app closes (the server process owns them). */
  ownsResources?: boolean;
}

/** The outbox relay of the app's status events, or nothing to flush when events are off. */
interface StatusEventFlush {
  /** Publishes every status event recorded (and committed) before the call. */
  flush(): Promise<void>;
}

export interface RegistryApp extends App {
  registry: RegistryService;
  holds: GpuHolds;
  market: Market;
  events: StatusEventFlush;
}

export async function buildApp(deps: RegistryDeps): Promise<RegistryApp> {
  const { config, logger, database, publisher } = deps;
  // One verifier for HTTP requests and NATS heartbeats.
  const verifier = deps.verifier ?? accessVerifier(config);
  const app = await createApp({
    service: SERVICE_NAME,
    description:
      'Provider registry of the GPU rental platform: providers register their machines and GPUs, send heartbeats, ' +
      'and the scheduler discovers them by status and GPU properties. Status changes are published on NATS.',
    config,
    logger,
    // NATS too where it is configured, as billing's: its events wait in the outbox while it is away.
    healthChecks: { database: () => database.ping(), ...(publisher.enabled ? { nats: () => publisher.ping() } : {}) },
    // Ready while its database answers: a NATS outage (events wait in the outbox) must not take every instance out of
    // a load balancer, and with them the machines' HTTP heartbeats (the sweeper would mark the fleet offline).
    readinessChecks: ['database'],
    verifier: verifier ?? undefined,
    schemas,
  });
  // Machines by status, counted when Prometheus scrapes.
  app.metrics.registerMetric(fleetMetric(database, logger));
  const outbox = new StatusOutbox(publisher.enabled);
  // The outbox's backlog (registry_outbox_backlog, registry_outbox_oldest_seconds) and the NATS connection.
  if (outbox.enabled)
    for (const metric of outboxMetrics('registry', database.db, logger)) app.metrics.registerMetric(metric);
  if (publisher instanceof NatsPublisher) app.metrics.registerMetric(natsConnectedGauge(publisher));
  const subject = config.messaging.subjects.status;
  const relay = outbox.enabled
    ? new OutboxRelay(database.db, publisher, { subject: () => subject, logger })
    : undefined;
  const registry = new RegistryService({
    db: database.db,
    outbox,
    offlineAfterMs: offlineAfterMs(config),
    retry: { attempts: config.database.retry_attempts, baseDelayMs: 50, maxDelayMs: 1000 },
  });
  const retry = { attempts: config.database.retry_attempts, baseDelayMs: 50, maxDelayMs: 1000 };
  const holds = new GpuHolds({ db: database.db, outbox, retry });
  const market = new Market({ db: database.db, logger, retry, whileAsked: (read) => registry.whileAsked(read) });
  // A run of the relay that was under way when an event committed may have missed it: a second run cannot.
  const events: StatusEventFlush = {
    flush: async () => {
      await relay?.flush();
      await relay?.flush();
    },
  };

  for (const metric of heartbeatBatchMetrics(() => registry.heartbeatStats)) app.metrics.registerMetric(metric);
  const routes: ProviderRoutesOptions = { registry, pages: new JsonArraySender() };
  await app.register(providerRoutes, routes);
  // A plugin of its own, so that its lenient JSON parser touches no other route.
  await app.register(heartbeatRoute, routes);
  // Billing's messages: its stream's consumers (below) and, for a billing without NATS, the inbox.
  const messages = billingMessages({ holds, market, logger });
  inboxRoute(app, { bus: messages, roles: SESSION_REPORTING_ROLES, schemas });
  await app.register(offerRoutes, { market });

  // A slice of the narrow table per run, the whole table once a third of the offline bound (a heartbeat interval by
  // default), or every run when the sweep runs less often than that.
  const sweepSlices = Math.max(
    1,
    Math.floor(offlineAfterMs(config) / 3 / Math.max(1, durationMs(config.offline_sweep_interval))),
  );
  const sweeper = new PeriodicTask(
    'offline sweep',
    durationMs(config.offline_sweep_interval),
    async () => {
      const providers = await registry.sweepSlice(sweepSlices);
      return providers > 0 ? { providers } : null;
    },
    logger,
  );
  const refresher = new PeriodicTask(
    "offers' reliability refresh",
    durationMs(config.offers.reliability_refresh),
    async () => {
      await market.refreshReliability();
      return null;
    },
    logger,
  );
  const retentionMs = durationMs(config.sessions.retention);
  const purger = new PeriodicTask(
    'counted session ends purge',
    retentionMs > 0 ? SESSION_PURGE_INTERVAL_MS : 0,
    async () => {
      const ends_deleted = await holds.purgeCountedEnds(retentionMs);
      return ends_deleted > 0 ? { ends_deleted } : null;
    },
    logger,
  );
  const consumers: DurableConsumer[] = [];
  let heartbeats: HeartbeatSubscriber | undefined;
  const nats = publisher instanceof NatsPublisher ? publisher : undefined;
  const heartbeatRejections = heartbeatRejectionCounter();
  if (deps.takeHeartbeats && nats) app.metrics.registerMetric(heartbeatRejections);
  // The consumers' lag: registry_consumer_pending{consumer} (read from the list the consumers join once started).
  if (deps.consumeSessionEvents && publisher instanceof NatsPublisher) {
    app.metrics.registerMetric(consumerPendingGauge('registry', consumers, logger));
  }
  app.addHook('onReady', async () => {
    relay?.start(RELAY_INTERVAL_MS, outbox);
    if (deps.sweeper !== false) {
      sweeper.start();
      refresher.start();
      purger.start();
      // A repricing an instance left unfinished, and the machines registered before the market existed: their
      // offers, in the background.
      void market.resumeRepricing().catch((err) => logger.warn({ err: (err as Error).message }, 'repricing failed'));
      void market
        .backfill()
        .then((machines) => machines > 0 && logger.info({ machines }, 'machines put on the market'))
        .catch((err) => logger.warn({ err: (err as Error).message }, 'putting machines on the market failed'));
    }
    if (deps.takeHeartbeats && nats) {
      const prefix = config.messaging.subjects.heartbeats;
      heartbeats = startHeartbeatSubscriber({
        connection: nats.connection,
        registry,
        verifier,
        prefix,
        // Subjects that name their sender only where no stream captures them (common's messaging/requests.ts).
        subjectIdentity: config.messaging.subject_identity && (await trustsSubjects(nats.connection, prefix, logger)),
        rejected: heartbeatRejections,
        ...(deps.heartbeatsPerClient ? { perClientInHand: deps.heartbeatsPerClient } : {}),
        logger,
      });
      // Ready means taking heartbeats: a daemon's first request after it finds a responder.
      await heartbeats.ready;
    }
    if (deps.consumeSessionEvents && publisher instanceof NatsPublisher) {
      consumers.push(
        ...startBillingConsumers({
          connection: publisher.connection,
          bus: messages,
          prefix: config.messaging.subjects.billing_events,
          durables: {
            sessions: config.messaging.session_consumer,
            leases: config.messaging.lease_consumer,
            prices: config.messaging.price_consumer,
          },
          logger,
        }),
      );
    }
  });
  app.addHook('onClose', async () => {
    await heartbeats?.stop();
    await Promise.all(consumers.map((c) => c.stop()));
    await sweeper.stop();
    await refresher.stop();
    await purger.stop();
    await market.settled();
    await relay?.stop();
    // What is left is published now, or by the next instance to run a relay.
    await relay
      ?.flush()
      .catch((err) => logger.warn({ err: (err as Error).message }, 'publishing status events failed'));
    if (deps.ownsResources) {
      await publisher.close().catch((err) => logger.warn({ err }, 'closing NATS failed'));
      await database.close();
    }
  });
  return Object.assign(app, { registry, holds, market, events });
}
