/**
 * The registry's schema at start: the frozen migrations (tables, columns, indexes), then the current definitions of
 * its functions and triggers (`definitions.ts`).
 */
import { type Logger, migrateToLatest } from '@gpu/common';
import type { Kysely } from 'kysely';
import { applyDefinitions } from './definitions.ts';
import { migrations } from './migrations/index.ts';

export async function migrateRegistry(db: Kysely<unknown>, log?: Logger): Promise<void> {
  await migrateToLatest(db, 'provider-registry', migrations, log);
  await applyDefinitions(db, log);
}
