/**
 * The provider registry process: load configuration, log (with any
 * deprecated setting names), open the database (PostgreSQL, else embedded
 * PGlite) and migrate it, connect to NATS when configured (the app then
 * relays its status events), listen, register with Consul, sweep silent
 * providers to offline, and shut down gracefully on SIGINT/SIGTERM.
 */
import {
  configWarnings,
  connectPublisher,
  databaseOptions,
  openDatabase,
  runService,
  serviceInboxPrefix,
  serviceLogger,
  startOrExit,
  startTracing,
} from '@gpu/common';
import type { Kysely } from 'kysely';
import { buildApp, SERVICE_NAME } from './app.ts';
import { loadRegistryConfig, resolveDatabaseUrl } from './config.ts';
import { migrateRegistry } from './db/migrate.ts';
import type { RegistryDB } from './db/schema.ts';

startOrExit(async () => {
  // Traces over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set (before the app is built: its hooks depend on it).
  const tracing = await startTracing({ service: SERVICE_NAME });
  const config = loadRegistryConfig();
  const logger = serviceLogger(SERVICE_NAME, config);
  for (const warning of configWarnings(config)) logger.warn(warning);
  const url = resolveDatabaseUrl(config);
  const database = await openDatabase<RegistryDB>(
    databaseOptions(config.database, {
      url,
      // PostgreSQL turns JIT compilation on from a plan's estimated cost, which large discovery pages exceed;
      // compiling then takes 40-700 ms, far more than the statement itself (README "Discovery").
      sessionSettings: { jit: 'off' },
    }),
  );
  logger.info({ kind: database.kind }, 'database opened');
  await migrateRegistry(database.db as Kysely<unknown>, logger);
  const { messaging } = config;
  const publisher = await connectPublisher({
    url: messaging.nats_url,
    credentials: messaging.nats_credentials,
    // Its answers on an inbox of its own, which its NATS user alone may read (PLATFORM_NATS_USERS).
    inboxPrefix: serviceInboxPrefix('provider-registry'),
    name: SERVICE_NAME,
    stream: messaging.stream ? { name: messaging.stream, subjects: [messaging.subjects.status] } : undefined,
    logger,
  });
  const app = await buildApp({
    config,
    logger,
    database,
    publisher,
    consumeSessionEvents: true,
    takeHeartbeats: true,
    ownsResources: true,
  });
  await runService({ name: SERVICE_NAME, config, logger, app, tracing });
});
