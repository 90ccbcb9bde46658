/** Every migration of the provider registry, by name (applied in name order). */
import type { Migration } from 'kysely';
import * as createProviders from './20250101000000_create_providers.ts';

export const migrations: Record<string, Migration> = {
  '20250101000000_create_providers': createProviders,
};
