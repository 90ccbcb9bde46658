/**
 * buildApp(ctx): the storage service's HTTP wiring. Never listens; tests
 * inject or listen on port 0 themselves.
 */
import { type App, createApp } from '@gpu/common';
import type { StorageContext } from './domain/context.ts';
import { bucketRoutes } from './routes/buckets.ts';
import { objectRoutes } from './routes/objects.ts';
import { presignRoutes } from './routes/presign.ts';

/** What the app is built from (the routes' context). */
export type StorageDeps = StorageContext;

export const SERVICE_NAME = 'storage-service';

export async function buildApp(ctx: StorageContext): Promise<App> {
  const app = await createApp({
    service: SERVICE_NAME,
    description:
      'Object storage service of the GPU rental platform: upload, download, head, delete and list objects, ' +
      'presigned URLs and bucket creation over an S3-compatible object store.',
    config: ctx.config,
    logger: ctx.logger,
    healthChecks: { object_store: () => ctx.store.ping() },
  });
  await app.register(bucketRoutes, ctx);
  await app.register(presignRoutes, ctx);
  await app.register(objectRoutes, ctx);
  return app;
}
