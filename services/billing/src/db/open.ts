/**
 * Opens the billing database (PostgreSQL, or embedded PGlite when no URL is
 * configured), migrates it (as the owner of `database.migration_url` when set,
 * granting the service's own role what it needs: @gpu/common's db/roles.ts)
 * and checks that the ledger's scale matches the configured token decimals.
 */
import {
  type Database,
  databaseOptions,
  durationMs,
  type Logger,
  migrateServiceDatabase,
  openDatabase,
} from '@gpu/common';
import type { Kysely } from 'kysely';
import type { BillingConfig } from '../config.ts';
import { billingMigrations } from './migrations/index.ts';
import type { BillingDB } from './schema.ts';

const MIGRATION_NAMESPACE = 'billing-service';

/** Opens and migrates; throws when the database was created for a token with other decimals. */
export async function openBillingDatabase(config: BillingConfig, logger?: Logger): Promise<Database<BillingDB>> {
  const database = await openDatabase<BillingDB>(databaseOptions(config.database));
  try {
    const scale = config.blockchain.token_decimals;
    await migrateServiceDatabase({
      database,
      section: config.database,
      service: MIGRATION_NAMESPACE,
      migrations: billingMigrations(scale),
      audit: { retentionMs: durationMs(config.audit.retention), purgeUrl: config.audit.purge_url },
      logger,
    });
    const row = await database.db
      .selectFrom('billing_meta')
      .select('value')
      .where('key', '=', 'token_decimals')
      .executeTakeFirstOrThrow();
    if (Number(row.value) !== scale) {
      throw new Error(
        `the billing database holds amounts with ${row.value} decimals but blockchain.token_decimals is ${scale}: ` +
          'a ledger cannot change its scale; use the token it was created for or a new database',
      );
    }
  } catch (err) {
    await database.close();
    throw err;
  }
  return database;
}

/** A cheap query for the health check: the database answers and holds billing's tables. */
export async function pingBillingDatabase(db: Kysely<BillingDB>): Promise<void> {
  await db.selectFrom('billing_meta').select('key').limit(1).execute();
}
