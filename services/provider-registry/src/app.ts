/**
 * buildApp(deps): the provider registry's HTTP wiring. Never listens; tests
 * inject or listen on port 0 themselves.
 */
import {
  type App,
  bearerAuth,
  createApp,
  type Database,
  durationMs,
  type EventPublisher,
  type Logger,
  type TokenVerifier,
} from '@gpu/common';
import { offlineAfterMs, type RegistryConfig } from './config.ts';
import type { RegistryDB } from './db/schema.ts';
import { OfflineSweeper } from './domain/offline-sweeper.ts';
import { RegistryService } from './domain/registry-service.ts';
import { StatusEvents } from './domain/status-events.ts';
import { enforcedAccess, openAccess } from './routes/access.ts';
import { providerRoutes } from './routes/providers.ts';

export const SERVICE_NAME = 'provider-registry';

export interface RegistryDeps {
  config: RegistryConfig;
  logger: Logger;
  database: Database<RegistryDB>;
  publisher: EventPublisher;
  /** Required when `config.auth.enabled`. */
  verifier?: TokenVerifier;
  /** Run the periodic offline sweep (default true; tests drive `registry.sweepOffline()` themselves). */
  sweeper?: boolean;
  /** Close the publisher and the database when the app closes (the server process owns them). */
  ownsResources?: boolean;
}

export interface RegistryApp extends App {
  registry: RegistryService;
  events: StatusEvents;
}

export async function buildApp(deps: RegistryDeps): Promise<RegistryApp> {
  const { config, logger, database } = deps;
  const app = await createApp({
    service: SERVICE_NAME,
    description:
      'Provider registry of the GPU rental platform: providers register their machines and GPUs, send heartbeats, ' +
      'and the scheduler discovers them by status and GPU properties. Status changes are published on NATS.',
    config,
    logger,
    healthChecks: { database: () => database.ping() },
  });
  const events = new StatusEvents(deps.publisher, config.events.status_subject, logger);
  const registry = new RegistryService({
    db: database.db,
    events,
    offlineAfterMs: offlineAfterMs(config),
    retry: { attempts: config.database.retry_attempts, baseDelayMs: 50, maxDelayMs: 1000 },
  });

  let access = openAccess;
  if (config.auth.enabled) {
    if (!deps.verifier) throw new Error('auth.enabled needs a token verifier');
    await app.register(bearerAuth, { verifier: deps.verifier });
    access = enforcedAccess;
  }
  await app.register(providerRoutes, { registry, access });

  const sweeper = new OfflineSweeper(registry, durationMs(config.offline_sweep_interval), logger);
  if (deps.sweeper !== false) app.addHook('onReady', async () => sweeper.start());
  app.addHook('onClose', async () => {
    await sweeper.stop();
    await events.flush();
    if (deps.ownsResources) {
      await deps.publisher.close().catch((err) => logger.warn({ err }, 'closing NATS failed'));
      await database.close();
    }
  });
  return Object.assign(app, { registry, events });
}
