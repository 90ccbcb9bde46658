/**
 * The auth service process: load and check configuration, log, open the
 * database (PostgreSQL, or embedded PGlite without DATABASE_URL), migrate (as the owner of
 * database.migration_url when set; with database.migrate_only, only that), warn when its role could rewrite
 * the audit trail,
 * load the signing key, create the initial admin, listen, register with
 * Consul, purge expired refresh tokens hourly, shut down gracefully.
 */
import {
  auditRound,
  auditTrailExposure,
  configWarnings,
  databaseOptions,
  durationMs,
  migrateServiceDatabase,
  openDatabase,
  runService,
  serviceLogger,
  startOrExit,
  startTracing,
} from '@gpu/common';
import { buildApp, SERVICE_NAME } from './app.ts';
import { checkAuthConfig, loadAuthConfig } from './config.ts';
import { createAuthContext } from './context-factory.ts';
import { migrations } from './db/migrations/index.ts';
import { deleteExpired } from './db/refresh-token-repository.ts';
import type { AuthDatabase } from './db/schema.ts';
import { ensureInitialAdmin } from './domain/accounts/index.ts';
import { ensureBootstrapClients } from './domain/clients.ts';

const PURGE_EVERY_MS = 60 * 60_000;
/** Expired refresh tokens are kept a day, so a late reuse still reads as "expired" rather than "invalid". */
const PURGE_AFTER_MS = 24 * 60 * 60_000;

startOrExit(async () => {
  // Traces over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set (before the app is built: its hooks depend on it).
  const tracing = await startTracing({ service: SERVICE_NAME });
  const config = loadAuthConfig();
  const logger = serviceLogger(SERVICE_NAME, config);
  for (const warning of configWarnings(config)) logger.warn(warning);
  for (const warning of checkAuthConfig(config)) logger.warn(warning);
  const database = await openDatabase<AuthDatabase>(databaseOptions(config.database));
  logger.info({ kind: database.kind }, 'database opened');
  const auditRetentionMs = durationMs(config.audit.retention);
  await migrateServiceDatabase({
    database,
    section: config.database,
    service: SERVICE_NAME,
    migrations,
    audit: { retentionMs: auditRetentionMs, purgeUrl: config.audit.purge_url },
    logger,
  });
  if (config.database.migrate_only) {
    // A deployment's migration step (database.migrate_only): the service itself starts later, without the owner's URL.
    logger.info('database migrated (migrate_only): exiting');
    await database.close();
    await tracing?.shutdown();
    return;
  }
  const exposure = await auditTrailExposure(database.db);
  if (exposure) {
    logger.warn(
      `${exposure}: auth could rewrite its own audit trail (disable its triggers, change or delete events). Run it as ` +
        'a role that may only append to and read the trail: database.migration_url names the owner the migrations ' +
        'run as (services/auth/README.md, "The audit trail")',
    );
  }
  const ctx = await createAuthContext(config, logger, database.db);
  logger.info({ algorithm: config.jwt.algorithm }, 'signing key loaded');
  const admin = await ensureInitialAdmin(ctx);
  if (admin !== 'not_configured') logger.info({ outcome: admin }, 'initial admin checked');
  for (const file of await ensureBootstrapClients(ctx)) logger.info({ file }, 'platform client secret written');

  // The audit trail's one deletion, events older than audit.retention (by the purge role), and its head in the log.
  const audit = await auditRound({
    db: database.db,
    purgeUrl: config.audit.purge_url,
    retentionMs: auditRetentionMs,
    logger,
  });
  const purge = setInterval(() => {
    deleteExpired(database.db, new Date(Date.now() - PURGE_AFTER_MS)).then(
      (n) => n > 0 && logger.info({ deleted: n }, 'expired refresh tokens purged'),
      (err) => logger.warn({ err }, 'purging expired refresh tokens failed'),
    );
    void audit.run();
  }, PURGE_EVERY_MS);
  purge.unref();

  const app = await buildApp(ctx);
  app.addHook('onClose', async () => {
    clearInterval(purge);
    // Mail on its way (and the lookups behind a reset) before the database closes.
    await ctx.mailer.close();
    await audit.close();
    await database.close();
  });
  await runService({ name: SERVICE_NAME, config, logger, app, tracing });
});
