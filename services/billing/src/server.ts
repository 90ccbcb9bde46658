/**
 * The billing service process: load configuration, log (with any deprecated
 * setting names), open and migrate the database (PGlite under
 * .data/billing/pglite without DATABASE_URL; as the owner of database.migration_url
 * when set, and with database.migrate_only nothing more), warn when its role
 * could rewrite the audit trail, connect to Solana and NATS,
 * reconcile pending withdrawals and payouts, listen, register with Consul,
 * shut down gracefully.
 */
import {
  accessVerifier,
  auditTrailExposure,
  configWarnings,
  connectPublisher,
  Outbox,
  runService,
  serviceInboxPrefix,
  serviceLogger,
  startOrExit,
  startTracing,
  tuneGcForStreams,
} from '@gpu/common';
import { registrySessionPublisher } from './adapters/registry-sessions.ts';
import { type BillingDeps, billingContext, buildApp, SERVICE_NAME } from './app.ts';
import { startBackground } from './background.ts';
import { connectChain } from './chain-setup.ts';
import { loadBillingConfig } from './config.ts';
import { openBillingDatabase } from './db/open.ts';

// Renters' forwarded ports pass through the reach relay here.
tuneGcForStreams();

startOrExit(async () => {
  // Traces over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set (before the app is built: its hooks depend on it).
  const tracing = await startTracing({ service: SERVICE_NAME });
  const config = loadBillingConfig();
  const logger = serviceLogger(SERVICE_NAME, config);
  for (const warning of configWarnings(config)) logger.warn(warning);
  if (!config.provider_registry.url) {
    logger.warn(
      'provider_registry.url is empty: billing cannot tell who owns a provider machine, so provider wallets, ' +
        'earnings, payouts and rates are for admins and services only',
    );
  }
  const database = await openBillingDatabase(config, logger);
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
      `${exposure}: billing could rewrite its own audit trail (disable its triggers, change or delete events). Run ` +
        'it as a role that may only append to and read the trail: database.migration_url names the owner the ' +
        'migrations run as (services/billing/README.md, "The audit trail")',
    );
  }
  const chain = await connectChain(config, logger);
  const nats = await connectPublisher({
    url: config.messaging.enabled ? config.messaging.nats_url : '',
    credentials: config.messaging.nats_credentials,
    // Its answers on an inbox of its own, which its NATS user alone may read (PLATFORM_NATS_USERS).
    inboxPrefix: serviceInboxPrefix('billing'),
    name: SERVICE_NAME,
    stream: { name: config.messaging.stream, subjects: [`${config.messaging.subjects.events}.>`] },
    logger,
  });
  // Without NATS, session events still reach the provider registry (busy/idle), over HTTP through the same outbox.
  const publisher = nats.enabled ? nats : (registrySessionPublisher(config.provider_registry, logger) ?? nats);
  // One verifier for HTTP requests and NATS usage messages.
  const verifier = accessVerifier(config);
  const deps: BillingDeps = {
    config,
    verifier: verifier ?? undefined,
    logger,
    db: database.db,
    chain,
    outbox: publisher.enabled ? new Outbox() : Outbox.disabled,
    healthChecks: nats.enabled ? { nats: () => nats.ping() } : undefined,
  };
  const ctx = billingContext(deps);
  const background = await startBackground(ctx, config, publisher, deps.outbox, verifier);
  const app = await buildApp({ ...deps, healthChecks: { ...deps.healthChecks, ...background.healthChecks } }, ctx);
  for (const metric of background.metrics) app.metrics.registerMetric(metric);
  app.addHook('onClose', async () => {
    // Answers sent while the server drained still have their events to append (the pool closes below).
    await app.auditAppended?.();
    await background.stop();
    await publisher.close();
    await database.close();
  });
  await runService({ name: SERVICE_NAME, config, logger, app, tracing });
});
