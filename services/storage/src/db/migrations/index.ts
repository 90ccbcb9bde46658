/** Every migration of the storage service, by name (applied in name order). */
import type { Migration } from 'kysely';
import * as objectCatalog from './20250101000000_object_catalog.ts';

export const migrations: Record<string, Migration> = {
  '20250101000000_object_catalog': objectCatalog,
};
