/**
 * The provider registry process: load configuration, log, open the database
 * (PostgreSQL, else embedded PGlite) and migrate it, connect to NATS when
 * configured, listen, register with Consul, sweep silent providers to
 * offline, and shut down gracefully on SIGINT/SIGTERM.
 */
import {
  connectPublisher,
  createTokenVerifier,
  durationMs,
  migrateToLatest,
  openDatabase,
  runService,
  serviceLogger,
  startOrExit,
} from '@gpu/common';
import type { Kysely } from 'kysely';
import { buildApp, SERVICE_NAME } from './app.ts';
import { loadRegistryConfig, resolveDatabaseUrl } from './config.ts';
import { migrations } from './db/migrations/index.ts';
import type { RegistryDB } from './db/schema.ts';

startOrExit(async () => {
  const config = loadRegistryConfig();
  const logger = serviceLogger(SERVICE_NAME, config);
  const url = resolveDatabaseUrl(config);
  const database = await openDatabase<RegistryDB>({
    url,
    embeddedPath: config.database.embedded_path,
    poolSize: config.database.pool_size,
    connectTimeoutMs: durationMs(config.database.connect_timeout),
    // PostgreSQL turns JIT compilation on from a plan's estimated cost, which large discovery pages exceed;
    // compiling then takes 40-700 ms, far more than the statement itself (README "Discovery").
    sessionSettings: { jit: 'off' },
  });
  logger.info({ kind: database.kind }, 'database opened');
  await migrateToLatest(database.db as Kysely<unknown>, SERVICE_NAME, migrations, logger);
  const publisher = await connectPublisher({
    url: config.nats_url,
    name: SERVICE_NAME,
    stream: config.events.stream ? { name: config.events.stream, subjects: [config.events.status_subject] } : undefined,
    logger,
  });
  const verifier = config.auth.enabled
    ? createTokenVerifier({
        issuer: config.auth.issuer,
        audience: config.auth.audience,
        secret: config.auth.secret || undefined,
        jwksUrl: config.auth.jwks_url || undefined,
      })
    : undefined;
  const app = await buildApp({ config, logger, database, publisher, verifier, ownsResources: true });
  await runService({ name: SERVICE_NAME, config, logger, app });
});
