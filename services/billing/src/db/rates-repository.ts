/** Queries on providers' own rates. Every function takes the database or a transaction. */
import type { Kysely, Selectable, Transaction } from 'kysely';
import type { BillingDB, ProviderRatesTable } from './schema.ts';

type Db = Kysely<BillingDB> | Transaction<BillingDB>;

export type ProviderRatesRow = Selectable<ProviderRatesTable>;

export async function findProviderRatesRow(db: Db, providerId: string): Promise<ProviderRatesRow | undefined> {
  return db.selectFrom('provider_rates').selectAll().where('provider_id', '=', providerId).executeTakeFirst();
}

/** Writes a provider's rates, replacing any it had. */
export async function upsertProviderRates(
  db: Db,
  providerId: string,
  values: {
    base_rates: string;
    vram_rate_per_gb_hour: string | null;
    power_rate_per_watt_hour: string | null;
    updated_at: Date;
  },
): Promise<void> {
  await db
    .insertInto('provider_rates')
    .values({ provider_id: providerId, ...values })
    .onConflict((oc) => oc.column('provider_id').doUpdateSet(values))
    .execute();
}
