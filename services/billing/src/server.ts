/**
 * The billing service process: load configuration, log, open and migrate the
 * database (PGlite under .data/billing/pglite without DATABASE_URL), connect
 * to Solana and NATS, reconcile pending withdrawals and payouts, listen,
 * register with Consul, shut down gracefully.
 */
import { connectPublisher, runService, serviceLogger, startOrExit } from '@gpu/common';
import { type BillingDeps, billingContext, buildApp, SERVICE_NAME } from './app.ts';
import { startBackground } from './background.ts';
import { connectChain } from './chain-setup.ts';
import { loadBillingConfig } from './config.ts';
import { openBillingDatabase } from './db/open.ts';
import { noEvents, outboxSink } from './domain/events.ts';

startOrExit(async () => {
  const config = loadBillingConfig();
  const logger = serviceLogger(SERVICE_NAME, config);
  const database = await openBillingDatabase(config, logger);
  const chain = await connectChain(config, logger);
  const publisher = await connectPublisher({
    url: config.messaging.enabled ? config.messaging.nats_url : '',
    name: SERVICE_NAME,
    stream: { name: 'BILLING_EVENTS', subjects: [`${config.messaging.subjects.events}.>`] },
    logger,
  });
  const deps: BillingDeps = {
    config,
    logger,
    db: database.db,
    chain,
    events: publisher.enabled ? outboxSink : noEvents,
    healthChecks: publisher.enabled ? { nats: () => publisher.ping() } : undefined,
  };
  const ctx = billingContext(deps);
  const background = await startBackground(ctx, config, publisher);
  const app = await buildApp({ ...deps, healthChecks: { ...deps.healthChecks, ...background.healthChecks } }, ctx);
  app.addHook('onClose', async () => {
    await background.stop();
    await publisher.close();
    await database.close();
  });
  await runService({ name: SERVICE_NAME, config, logger, app });
});
