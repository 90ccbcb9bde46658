/**
 * What the storage routes and rules work with: the configuration, the logger, the object store (writing through to
 * the object catalog), the catalog and its reconciliation, and the access rules.
 */
import { randomUUID } from 'node:crypto';
import { durationMs, type Logger } from '@gpu/common';
import type { StorageConfig } from '../config.ts';
import { StorageAccess } from './access.ts';
import { BucketOwners } from './bucket-owners.ts';
import { CatalogedStore, type ObjectCatalog, ObjectOwners, Reconciler } from './catalog/index.ts';
import type { ObjectStore } from './store.ts';
import { type StartLock, Uploads } from './uploads/resumable.ts';

/** What the app is built from. */
export interface StorageDeps {
  config: StorageConfig;
  logger: Logger;
  /** The object store itself; the context wraps it so that writes reach the catalog too. */
  store: ObjectStore;
  /** The object catalog (the service's database). */
  catalog: ObjectCatalog;
  /** Takes turns of one owner's upload starts across instances (the service's database). */
  startLock: StartLock;
}

export interface StorageContext extends StorageDeps {
  access: StorageAccess;
  owners: BucketOwners;
  uploads: Uploads;
  reconciler: Reconciler;
}

export function storageContext(deps: StorageDeps): StorageContext {
  const { object_store: settings } = deps.config;
  const owners = new BucketOwners(deps.store, settings.owners_bucket);
  const objectOwners = new ObjectOwners(owners, settings.default_bucket);
  const store = new CatalogedStore(deps.store, deps.catalog, objectOwners, settings.owners_bucket);
  const uploads = new Uploads(
    store,
    settings.owners_bucket,
    {
      maxSize: settings.max_upload_size,
      expiryMs: durationMs(settings.upload_expiry),
    },
    deps.startLock,
    deps.logger,
  );
  const reconciler = new Reconciler({
    store: deps.store,
    catalog: deps.catalog,
    owners: objectOwners,
    bucketOwners: owners,
    defaultBucket: settings.default_bucket,
    recordsBucket: settings.owners_bucket,
    instanceId: deps.config.instance_id || randomUUID(),
    intervalMs: durationMs(settings.reconcile_interval),
    pagesPerRun: settings.reconcile_pages,
    logger: deps.logger,
  });
  return {
    ...deps,
    store,
    owners,
    uploads,
    reconciler,
    access: new StorageAccess(store, owners, settings.default_bucket),
  };
}
