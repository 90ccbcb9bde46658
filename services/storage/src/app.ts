/**
 * buildApp(deps): the storage service's HTTP wiring. Never listens; tests
 * inject or listen on port 0 themselves.
 */
import { type App, createApp, type Logger } from '@gpu/common';
import type { ObjectStore } from './adapters/object-store.ts';
import type { StorageConfig } from './config.ts';
import { bucketRoutes } from './routes/buckets.ts';
import { objectRoutes } from './routes/objects.ts';
import { presignRoutes } from './routes/presign.ts';

export interface StorageDeps {
  config: StorageConfig;
  logger: Logger;
  store: ObjectStore;
}

export const SERVICE_NAME = 'storage-service';

export async function buildApp(deps: StorageDeps): Promise<App> {
  const app = await createApp({
    service: SERVICE_NAME,
    description:
      'Object storage service of the GPU rental platform: upload, download, head, delete and list objects, ' +
      'presigned URLs and bucket creation over an S3-compatible object store.',
    config: deps.config,
    logger: deps.logger,
    healthChecks: { object_store: () => deps.store.ping() },
  });
  await app.register(bucketRoutes, deps);
  await app.register(presignRoutes, deps);
  await app.register(objectRoutes, deps);
  return app;
}
