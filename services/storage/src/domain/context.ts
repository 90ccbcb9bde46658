/** What the storage routes and rules work with: the configuration, the logger, the object store and its access rules. */
import { durationMs, type Logger } from '@gpu/common';
import type { StorageConfig } from '../config.ts';
import { StorageAccess } from './access.ts';
import { BucketOwners } from './bucket-owners.ts';
import type { ObjectStore } from './store.ts';
import { Uploads } from './uploads/resumable.ts';

/** What the app is built from. */
export interface StorageDeps {
  config: StorageConfig;
  logger: Logger;
  store: ObjectStore;
}

export interface StorageContext extends StorageDeps {
  access: StorageAccess;
  owners: BucketOwners;
  uploads: Uploads;
}

export function storageContext(deps: StorageDeps): StorageContext {
  const { object_store: settings } = deps.config;
  const owners = new BucketOwners(deps.store, settings.owners_bucket);
  const uploads = new Uploads(
    deps.store,
    settings.owners_bucket,
    {
      maxSize: settings.max_upload_size,
      expiryMs: durationMs(settings.upload_expiry),
    },
    deps.logger,
  );
  return { ...deps, owners, uploads, access: new StorageAccess(deps.store, owners, settings.default_bucket) };
}
