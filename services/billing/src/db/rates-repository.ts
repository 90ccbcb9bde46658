/** Queries on providers' own rates. Every function takes the database or a transaction. */
import { lockName } from '@gpu/common';
import { type Kysely, type Selectable, sql, type Transaction } from 'kysely';
import type { BillingDB, ProviderRatesTable } from './schema.ts';

type Db = Kysely<BillingDB> | Transaction<BillingDB>;

export type ProviderRatesRow = Selectable<ProviderRatesTable>;

/**
 * Serialises the changes of one machine's rates until the transaction ends (a transaction-scoped advisory lock on its
 * ID: a row that does not exist yet cannot be locked), so a conditional change's check and its write are one step.
 */
export async function lockProviderRates(trx: Transaction<BillingDB>, providerId: string): Promise<void> {
  await lockName(trx, `rates:${providerId}`);
}

export async function findProviderRatesRow(db: Db, providerId: string): Promise<ProviderRatesRow | undefined> {
  return db.selectFrom('provider_rates').selectAll().where('provider_id', '=', providerId).executeTakeFirst();
}

/**
 * The providers' rates never recorded for the market as they are now, locked (skipping those another instance is
 * announcing): in the caller's transaction, which marks them announced (`markRatesAnnounced`) with their events.
 */
export async function lockUnannouncedProviderRates(trx: Transaction<BillingDB>): Promise<ProviderRatesRow[]> {
  return trx
    .selectFrom('provider_rates')
    .selectAll()
    .where((eb) => eb.or([eb('announced_at', 'is', null), eb('announced_at', '<', eb.ref('updated_at'))]))
    .orderBy('provider_id')
    .forUpdate()
    .skipLocked()
    .execute();
}

/** Marks the provider's rates, as they are now, recorded for the market. */
export async function markRatesAnnounced(db: Db, providerId: string): Promise<void> {
  await db
    .updateTable('provider_rates')
    .set({ announced_at: sql<Date>`updated_at` })
    .where('provider_id', '=', providerId)
    .execute();
}

/**
 * Writes a provider's rates, replacing any it had. `updated_at` is the database's clock, and later than the rates it
 * replaces whatever the order concurrent writes take the row lock in: the newest rates are the last written, so the
 * market (which keeps the newest it is told) ends where billing does.
 */
export async function upsertProviderRates(
  db: Db,
  providerId: string,
  values: {
    base_rates: string;
    vram_rate_per_gb_hour: string | null;
    power_rate_per_watt_hour: string | null;
    bid_floor: string | null;
  },
): Promise<void> {
  await db
    .insertInto('provider_rates')
    .values({ provider_id: providerId, ...values, updated_at: sql<Date>`clock_timestamp()` })
    .onConflict((oc) =>
      oc.column('provider_id').doUpdateSet({
        ...values,
        updated_at: sql<Date>`greatest(clock_timestamp(), provider_rates.updated_at + interval '1 microsecond')`,
      }),
    )
    .execute();
}
