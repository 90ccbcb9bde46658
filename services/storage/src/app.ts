/**
 * buildApp(ctx): the storage service's HTTP wiring. Never listens; tests
 * inject or listen on port 0 themselves.
 */
import { type App, createApp, durationMs, type EventPublisher, NatsPublisher, natsConnectedGauge } from '@gpu/common';
import { billingUsageSink, natsUsageSink } from './adapters/billing-usage.ts';
import type { Reconciler } from './domain/catalog/index.ts';
import { type StorageDeps, storageContext } from './domain/context.ts';
import { PeriodClaims, StorageMeter, type UsageSink, withOpenUploads } from './domain/metering.ts';
import { startSweeper } from './domain/uploads/resumable.ts';
import { bucketRoutes } from './routes/buckets.ts';
import { grantRoutes } from './routes/grants.ts';
import { objectCopyRoute } from './routes/object-copy.ts';
import { objectRoutes } from './routes/objects.ts';
import { presignRoutes } from './routes/presign.ts';
import { schemas } from './routes/schemas.ts';
import { uploadPartRoute, uploadRoutes } from './routes/uploads.ts';

export const SERVICE_NAME = 'storage-service';

export interface StorageAppDeps extends StorageDeps {
  /** Where the meter reports stored bytes (tests); by default billing, as `metering` and `messaging` configure it. */
  usageSink?: UsageSink | null;
  /** NATS (JetStream) when `messaging.nats_url` is set and it could be reached at start: the usage reports go there. */
  nats?: EventPublisher;
}

/** The app, with its meter (null: metering off) and the object catalog's reconciliation (tests run them by hand). */
export type StorageApp = App & { meter: StorageMeter | null; reconciler: Reconciler };

export async function buildApp(deps: StorageAppDeps): Promise<StorageApp> {
  const ctx = storageContext(deps);
  const app = await createApp({
    service: SERVICE_NAME,
    description:
      'Object storage service of the GPU rental platform: upload, download, head, delete and list objects, ' +
      "presigned URLs (and grants of them for a user's workload) and bucket creation over an S3-compatible object store.",
    config: ctx.config,
    logger: ctx.logger,
    // NATS carries only the hourly usage reports (kept and sent again when they fail): it is no part of serving
    // objects, so it is not part of /health (a readiness probe). The database holds the object catalog: listings
    // and every write need it.
    healthChecks: { object_store: () => ctx.store.ping(), database: async () => void (await ctx.catalog.now()) },
    readinessChecks: ['object_store', 'database'],
    schemas,
  });
  await app.register(bucketRoutes, ctx);
  await app.register(presignRoutes, ctx);
  await app.register(grantRoutes, ctx);
  await app.register(objectRoutes, ctx);
  await app.register(objectCopyRoute, ctx);
  await app.register(uploadRoutes, ctx);
  await app.register(uploadPartRoute, ctx);

  // Unfinished resumable uploads expire: swept every quarter of upload_expiry (1 s to 1 h), on every instance.
  const expiryMs = durationMs(ctx.config.object_store.upload_expiry);
  let stopSweeper: (() => void) | undefined;
  app.addHook('onReady', async () => {
    stopSweeper = startSweeper(ctx.uploads, Math.min(3_600_000, Math.max(1000, expiryMs / 4)), ctx.logger);
  });
  app.addHook('onClose', async () => stopSweeper?.());

  // The object catalog follows the store: reconciled at start and every reconcile_interval (domain/catalog/).
  app.addHook('onReady', async () => ctx.reconciler.start());
  app.addHook('onClose', async () => ctx.reconciler.stop());

  // Whether the usage reports' NATS connection is up (the NatsUnreachable alert reads it, as for billing and the registry).
  if (deps.nats instanceof NatsPublisher) app.metrics.registerMetric(natsConnectedGauge(deps.nats));
  // Stored bytes, billed: measured once per period and reported to billing (domain/metering.ts).
  const { metering, messaging } = ctx.config;
  const sink =
    deps.usageSink !== undefined
      ? deps.usageSink
      : deps.nats?.enabled
        ? natsUsageSink(metering, messaging.subjects.usage, deps.nats)
        : billingUsageSink(metering, ctx.logger);
  const meter = sink
    ? new StorageMeter({
        usage: withOpenUploads(ctx.catalog, ctx.uploads, ctx.logger),
        sink,
        intervalMs: durationMs(metering.interval),
        logger: ctx.logger,
        claims: new PeriodClaims(ctx.store, ctx.owners.recordsBucket, ctx.config.instance_id || undefined),
      })
    : null;
  if (meter) {
    app.addHook('onReady', async () => meter.start());
    app.addHook('onClose', async () => meter.stop());
  } else {
    ctx.logger.info('storage metering is off (neither metering.billing_url nor NATS, or metering.interval 0s)');
  }
  return Object.assign(app, { meter, reconciler: ctx.reconciler });
}
