/**
 * The storage service process: load configuration (a default file is written
 * when absent), log (with any deprecated setting names), open the database
 * of the object catalog and migrate it, connect to the object store and test the connection, ensure the default bucket, connect
 * to NATS when the usage reports go there, listen,
 * register with Consul, shut down gracefully.
 */
import {
  configWarnings,
  connectPublisher,
  databaseOptions,
  durationMs,
  type EventPublisher,
  migrateToLatest,
  NoopPublisher,
  openDatabase,
  runService,
  serviceInboxPrefix,
  serviceLogger,
  startOrExit,
  startTracing,
} from '@gpu/common';
import type { Kysely } from 'kysely';
import { S3ObjectStore } from './adapters/object-store.ts';
import { buildApp, SERVICE_NAME } from './app.ts';
import { loadStorageConfig } from './config.ts';
import { migrations } from './db/migrations/index.ts';
import { ObjectRepository } from './db/object-repository.ts';
import type { StorageDB } from './db/schema.ts';
import { uploadStartLock } from './db/upload-start-lock.ts';

startOrExit(async () => {
  // Traces over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set (before the app is built: its hooks depend on it).
  const tracing = await startTracing({ service: SERVICE_NAME });
  const config = loadStorageConfig();
  const logger = serviceLogger(SERVICE_NAME, config);
  for (const warning of configWarnings(config)) logger.warn(warning);
  // The object catalog's database: PostgreSQL at database.url, else embedded PGlite at database.embedded_path.
  const database = await openDatabase<StorageDB>(databaseOptions(config.database));
  logger.info({ kind: database.kind }, 'database opened');
  await migrateToLatest(database.db as Kysely<unknown>, SERVICE_NAME, migrations, logger);
  const store = new S3ObjectStore(config.object_store, logger);
  await store.waitUntilReachable(durationMs(config.object_store.connect_timeout), logger);
  const { default_bucket: bucket, auto_create_default_bucket: autoCreate } = config.object_store;
  if (autoCreate && bucket) {
    const outcome = await store.ensureBucket(bucket);
    logger.info({ bucket, outcome }, 'default bucket ensured');
  }
  // NATS carries the usage reports when configured (and metering is on); else they go to billing over HTTP.
  const { messaging, metering } = config;
  // NATS away at start does not stop the service: the reports go over HTTP (metering.billing_url) until a restart.
  const nats: EventPublisher = await connectPublisher({
    url: durationMs(metering.interval) > 0 ? messaging.nats_url : '',
    credentials: messaging.nats_credentials,
    // Its answers on an inbox of its own, which its NATS user alone may read (PLATFORM_NATS_USERS).
    inboxPrefix: serviceInboxPrefix('storage'),
    name: SERVICE_NAME,
    stream: { name: messaging.stream, subjects: [`${messaging.subjects.usage}.>`] },
    logger,
  }).catch((err: Error) => {
    logger.warn({ err: err.message }, 'NATS not reached: storage usage reports go over HTTP to metering.billing_url');
    return new NoopPublisher();
  });
  const app = await buildApp({
    config,
    logger,
    store,
    catalog: new ObjectRepository(database.db),
    startLock: uploadStartLock(database.db, database.kind),
    nats,
  });
  app.addHook('onClose', async () => {
    await nats.close();
    store.close();
    await database.close();
  });
  await runService({ name: SERVICE_NAME, config, logger, app, tracing });
});
