/** The auth service's migrations, in order; run by `migrateToLatest` from @gpu/common. */
import type { Migration } from 'kysely';
import * as initial from './20250101000000_initial.ts';

export const migrations: Record<string, Migration> = {
  '20250101000000_initial': initial,
};
