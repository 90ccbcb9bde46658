/**
 * A fresh billing database with none of billing's migrations applied, and a Migrator over them under billing's own
 * table names: for tests of what a migration does to the data of the version before it.
 */
import { openDatabase, serviceMigrator } from '@gpu/common';
import { createTestDatabase } from '@gpu/common/testing';
import type { Kysely, Migrator } from 'kysely';
import { billingMigrations } from '../../src/db/migrations/index.ts';

export interface UnmigratedBilling {
  db: Kysely<unknown>;
  /** Billing's migrations (scale 6), to migrate to one by name, or down. */
  migrator: Migrator;
  migrations: ReturnType<typeof billingMigrations>;
  /** Closes the pool and drops the database. */
  close(): Promise<void>;
}

export async function unmigratedBilling(): Promise<UnmigratedBilling> {
  const test = await createTestDatabase('billing');
  const database = await openDatabase<unknown>({ url: test.url, poolSize: 2 });
  const db = database.db as Kysely<unknown>;
  const migrations = billingMigrations(6);
  const migrator = serviceMigrator(db, 'billing-service', migrations);
  return {
    db,
    migrator,
    migrations,
    close: async () => {
      await database.close();
      await test.drop();
    },
  };
}
