/** What the storage routes and rules work with: the configuration, the logger and the object store. */
import type { Logger } from '@gpu/common';
import type { StorageConfig } from '../config.ts';
import type { ObjectStore } from './store.ts';

export interface StorageContext {
  config: StorageConfig;
  logger: Logger;
  store: ObjectStore;
}
