/**
 * buildApp(ctx): the storage service's HTTP wiring. Never listens; tests
 * inject or listen on port 0 themselves.
 */
import { type App, createApp } from '@gpu/common';
import { DEFAULT_PORT } from './config.ts';
import { type StorageDeps, storageContext } from './domain/context.ts';
import { bucketRoutes } from './routes/buckets.ts';
import { objectRoutes } from './routes/objects.ts';
import { presignRoutes } from './routes/presign.ts';
import { schemas } from './routes/schemas.ts';

export type { StorageDeps };

export const SERVICE_NAME = 'storage-service';

export async function buildApp(deps: StorageDeps): Promise<App> {
  const ctx = storageContext(deps);
  const app = await createApp({
    service: SERVICE_NAME,
    description:
      'Object storage service of the GPU rental platform: upload, download, head, delete and list objects, ' +
      'presigned URLs and bucket creation over an S3-compatible object store.',
    config: ctx.config,
    logger: ctx.logger,
    healthChecks: { object_store: () => ctx.store.ping() },
    schemas,
    defaultPort: DEFAULT_PORT,
  });
  await app.register(bucketRoutes, ctx);
  await app.register(presignRoutes, ctx);
  await app.register(objectRoutes, ctx);
  return app;
}
