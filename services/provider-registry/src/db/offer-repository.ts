/**
 * Offers in SQL (see the offers migration for how the table keeps itself in step with statuses, GPU health and
 * reliability): writing a machine's offers with its GPUs, billing's prices and the repricing they cause, the
 * periodic reliability refresh, and the search.
 */
import { arrayLiteral } from '@gpu/common';
import { type Kysely, type RawBuilder, sql, type Transaction } from 'kysely';
import type { GpuInput } from '../domain/gpu-fields.ts';
import type { OfferCursor, OfferFilter, OfferGroup, OfferSortKey } from '../domain/offers.ts';
import { offerSortOf, VRAM_PRICE_SCALE, versionParts } from '../domain/offers.ts';
import type { ProviderStatus } from '../domain/provider.ts';
import type { RegistryDB } from './schema.ts';

type Db = Kysely<RegistryDB> | Transaction<RegistryDB>;

/** What an offer's price per GPU-hour is made of, as the database adds it up (decimal strings). */
interface OfferPriceParts {
  base: string;
  base_source: 'provider' | 'platform';
  vram: string;
  vram_gb: string;
  vram_rate_per_gb_hour: string;
  vram_rate_source: 'provider' | 'platform';
  power: string;
  power_w: string;
  power_rate_per_watt_hour: string;
  power_rate_source: 'provider' | 'platform';
  demand_multiplier: string;
  supply_factor: string;
}

/** An offer as the search reads it. */
export interface OfferRow {
  provider_id: string;
  model_key: string;
  gpu_model: string;
  model_names: string[];
  gpu_count: number;
  free_gpus: number;
  min_gpus_per_rental: number;
  vram_mb: string;
  architecture: string | null;
  driver_version: string;
  compute_capability: string | null;
  region: string | null;
  disk_mb: number | null;
  price_per_gpu_hour: string | null;
  /** The price per GB of VRAM-hour (`VRAM_PRICE_SCALE` decimals, trailing zeros trimmed). */
  price_per_vram_gb_hour: string | null;
  /** What the price is made of (`offer_price_parts`); null without a card. */
  price_parts: OfferPriceParts | null;
  reliability: number;
  uptime_30d: number | null;
  observed_seconds_30d: number;
  sessions_ended: number;
  sessions_failed: number;
  /**
   * The group for an interruptible rental (null: the machine takes no bids): its bid floor, the GPUs a bid could
   * get now (free, and held at bids), the floor while a GPU is free, and the lowest bid holding one.
   */
  interruptible: { bid_floor: string; gpus: number; winning_bid: string | null; outbid_above: string | null } | null;
  /** The sort value as text, for the next page's cursor. */
  sort_value: string;
}

/**
 * An offer's interruptible side, from the machine's bid floor and the bids of its group's held GPUs (one row per
 * offer the page returns): a free GPU is won at the floor; a held one by a bid above the lowest bid holding one (and
 * at least the floor). GPUs count while the machine is up and not held by its owner (billing rents none of a held
 * machine's, at any bid), and they make at least the group the machine rents.
 */
const interruptibleSql = sql`(
  SELECT jsonb_build_object(
    'bid_floor', trim_scale(pp.bid_floor)::text,
    'gpus', CASE WHEN o.status IN ('idle', 'busy') AND NOT p.held AND o.unrented_gpus + b.n >= o.min_gpus_per_rental
      THEN o.unrented_gpus + b.n ELSE 0 END,
    'winning_bid', CASE WHEN o.free_gpus > 0 THEN trim_scale(pp.bid_floor)::text END,
    'outbid_above', CASE WHEN o.status IN ('idle', 'busy') AND NOT p.held THEN trim_scale(b.lowest)::text END)
  FROM provider_prices pp
  JOIN providers p ON p.id = o.provider_id
  CROSS JOIN LATERAL (
    SELECT count(*)::int AS n, min((h.bids ->> gp.idx::text)::numeric) AS lowest
    FROM gpu_holds h JOIN gpus gp ON gp.provider_id = h.provider_id
    WHERE h.provider_id = o.provider_id AND gp.model_name = ANY (o.model_names) AND gp.is_healthy
      AND h.bids ? gp.idx::text
  ) b
  WHERE pp.provider_id = o.provider_id AND pp.bid_floor IS NOT NULL)`;

/**
 * Replaces a machine's offers with those of its GPU groups (in the transaction that writes its GPUs): the groups'
 * rows, then what the database works out from the GPUs themselves (health, VRAM, power, price: `offers_refresh_gpus`)
 * and the machine's reliability.
 */
export async function writeOffers(
  tx: Transaction<RegistryDB>,
  providerId: string,
  groups: readonly OfferGroup[],
  status: ProviderStatus,
  machine: { region: string | null; diskMb: number | null },
): Promise<void> {
  await tx.deleteFrom('offers').where('provider_id', '=', providerId).execute();
  if (groups.length === 0) return;
  const parts = (v: string | null) => {
    const p = versionParts(v);
    return p ? arrayLiteral(p) : null;
  };
  await tx
    .insertInto('offers')
    .values(
      groups.map((g) => ({
        provider_id: providerId,
        model_key: g.modelKey,
        gpu_model: g.gpuModel,
        model_names: g.modelNames,
        gpu_count: g.gpuCount,
        architecture: g.architecture,
        driver_version: g.driverVersion,
        driver_version_parts: sql<number[]>`${parts(g.driverVersion)}::integer[]`,
        compute_capability: g.computeCapability,
        compute_capability_parts: sql<number[]>`${parts(g.computeCapability)}::integer[]`,
        region: machine.region,
        disk_mb: machine.diskMb,
        status,
      })),
    )
    .execute();
  await sql`SELECT offers_refresh_gpus(${providerId}::uuid)`.execute(tx);
  await refreshReliability(tx, providerId);
}

/**
 * Gives up to `limit` machines that have GPUs but no offers theirs (registered before the market existed): one
 * transaction each, under the machine's row lock, so a registration or update running at once writes them once.
 * How many machines it gave offers to.
 */
export async function backfillOffers(
  db: Kysely<RegistryDB>,
  limit: number,
  groupsOf: (gpus: readonly GpuInput[]) => readonly OfferGroup[],
): Promise<number> {
  const { rows } = await sql<{ id: string }>`
    SELECT p.id FROM providers p
    WHERE EXISTS (SELECT 1 FROM gpus g WHERE g.provider_id = p.id)
      AND NOT EXISTS (SELECT 1 FROM offers o WHERE o.provider_id = p.id)
    LIMIT ${limit}`.execute(db);
  let done = 0;
  for (const { id } of rows) {
    done += await db.transaction().execute(async (tx) => {
      const p = await tx
        .selectFrom('providers')
        .select(['status', 'location', 'disk_mb'])
        .where('id', '=', id)
        .forUpdate()
        .executeTakeFirst();
      const has = await tx.selectFrom('offers').select('provider_id').where('provider_id', '=', id).executeTakeFirst();
      if (!p || has) return 0;
      const gpus = await tx
        .selectFrom('gpus')
        .select(['model_name', 'driver_version', 'architecture', 'compute_capability'])
        .where('provider_id', '=', id)
        .orderBy('idx')
        .execute();
      await writeOffers(tx, id, groupsOf(gpus as unknown as GpuInput[]), p.status as ProviderStatus, {
        region: p.location,
        diskMb: p.disk_mb,
      });
      return 1;
    });
  }
  return done;
}

/** The machine's reliability on its offers, from its books (after a session of it ended). */
export async function refreshReliability(db: Db, providerId: string): Promise<void> {
  await sql`SELECT offers_refresh_reliability(${providerId}::uuid)`.execute(db);
}

/**
 * Refreshes the reliability of the offers of up to `limit` machines after `after` (in ID order), for the periodic
 * walk that rolls the 30-day window on; the last machine refreshed, or null when the walk is over.
 */
export async function refreshReliabilityPage(db: Db, after: string | null, limit: number): Promise<string | null> {
  const ids = await offerMachines(db, after, limit);
  if (ids.length > 0) {
    await sql`SELECT offers_refresh_reliability(id) FROM unnest(${ids}::uuid[]) AS id`.execute(db);
  }
  return ids.length < limit ? null : ids.at(-1)!;
}

/** What billing's price card says (the newest wins); whether it was newer than the one held. */
export async function storePriceCard(
  db: Db,
  card: { baseRates: Record<string, string>; vramRate: string; powerRate: string; factors: Record<string, unknown> },
  occurredAt: Date,
): Promise<boolean> {
  const { rows } = await sql<{ id: number }>`
    INSERT INTO price_card (id, base_rates, vram_rate_per_gb_hour, power_rate_per_watt_hour, factors, occurred_at)
    VALUES (1, ${JSON.stringify(card.baseRates)}::jsonb, ${card.vramRate}::numeric, ${card.powerRate}::numeric,
      ${JSON.stringify(card.factors)}::jsonb, ${occurredAt.toISOString()}::timestamptz)
    ON CONFLICT (id) DO UPDATE SET base_rates = EXCLUDED.base_rates,
      vram_rate_per_gb_hour = EXCLUDED.vram_rate_per_gb_hour, power_rate_per_watt_hour = EXCLUDED.power_rate_per_watt_hour,
      factors = EXCLUDED.factors, occurred_at = EXCLUDED.occurred_at
    WHERE price_card.occurred_at <= EXCLUDED.occurred_at
    RETURNING id`.execute(db);
  return rows.length > 0;
}

/**
 * A machine's own rates (the newest wins; none for a machine the registry does not know); whether they were stored.
 */
export async function storeProviderPrices(
  db: Db,
  providerId: string,
  rates: {
    baseRates: Record<string, string>;
    vramRate: string | null;
    powerRate: string | null;
    bidFloor?: string | null;
  },
  occurredAt: Date,
): Promise<boolean> {
  const { rows } = await sql<{ provider_id: string }>`
    INSERT INTO provider_prices
      (provider_id, base_rates, vram_rate_per_gb_hour, power_rate_per_watt_hour, bid_floor, occurred_at)
    SELECT id, ${JSON.stringify(rates.baseRates)}::jsonb, ${rates.vramRate}::numeric, ${rates.powerRate}::numeric,
      ${rates.bidFloor ?? null}::numeric, ${occurredAt.toISOString()}::timestamptz
    FROM providers WHERE id = ${providerId}::uuid
    ON CONFLICT (provider_id) DO UPDATE SET base_rates = EXCLUDED.base_rates,
      vram_rate_per_gb_hour = EXCLUDED.vram_rate_per_gb_hour, power_rate_per_watt_hour = EXCLUDED.power_rate_per_watt_hour,
      bid_floor = EXCLUDED.bid_floor, occurred_at = EXCLUDED.occurred_at
    WHERE provider_prices.occurred_at <= EXCLUDED.occurred_at
    RETURNING provider_id`.execute(db);
  return rows.length > 0;
}

/** The held card's time, and whether every offer was priced by it; undefined without a card. */
export async function cardState(db: Db): Promise<{ occurredAt: Date; repriced: boolean } | undefined> {
  const row = await db.selectFrom('price_card').select(['occurred_at', 'repriced_at']).executeTakeFirst();
  if (!row) return undefined;
  const at = new Date(row.occurred_at);
  return { occurredAt: at, repriced: row.repriced_at !== null && new Date(row.repriced_at).getTime() === at.getTime() };
}

/** Marks the card of `occurredAt` as applied to every offer (unless a newer one came meanwhile). */
export async function markRepriced(db: Db, occurredAt: Date): Promise<void> {
  await sql`UPDATE price_card SET repriced_at = occurred_at WHERE occurred_at = ${occurredAt.toISOString()}::timestamptz`.execute(
    db,
  );
}

/** Prices a machine's offers again (its own rates changed; a trigger has copied its bid floor onto them). */
export async function repriceProvider(trx: Transaction<RegistryDB>, providerId: string): Promise<void> {
  await lockOffers(trx, [providerId]);
  await sql`
    UPDATE offers SET price_per_gpu_hour = offer_price(provider_id, model_key, avg_vram_mb, avg_power_w)
    WHERE provider_id = ${providerId}::uuid`.execute(trx);
}

/**
 * Locks the machines' offers, in one order, before a statement prices them: the price is read in a statement that
 * starts after the lock is held, so it sees the rates a concurrent writer committed (an UPDATE that waited on a row
 * would otherwise write the price it worked out from the rates of its start, over a newer one).
 */
async function lockOffers(trx: Transaction<RegistryDB>, ids: string[]): Promise<void> {
  await sql`
    SELECT 1 FROM offers WHERE provider_id = ANY(${ids}::uuid[])
    ORDER BY provider_id, model_key FOR UPDATE`.execute(trx);
}

/** Up to `limit` machines with offers after `after`, in ID order (a page of a walk over the market). */
async function offerMachines(db: Db, after: string | null, limit: number): Promise<string[]> {
  const { rows } = await sql<{ provider_id: string }>`
    SELECT DISTINCT provider_id FROM offers
    WHERE provider_id > coalesce(${after}::uuid, '00000000-0000-0000-0000-000000000000'::uuid)
    ORDER BY provider_id LIMIT ${limit}`.execute(db);
  return rows.map((r) => r.provider_id);
}

/**
 * Prices again the offers of up to `limit` machines after `after` (the platform's card changed: every machine, a page
 * at a time so no statement holds a million rows); the last machine repriced, or null when done.
 */
export async function repricePage(db: Kysely<RegistryDB>, after: string | null, limit: number): Promise<string | null> {
  const ids = await offerMachines(db, after, limit);
  if (ids.length > 0) {
    await db.transaction().execute(async (trx) => {
      await lockOffers(trx, ids);
      await sql`
        UPDATE offers SET price_per_gpu_hour = offer_price(provider_id, model_key, avg_vram_mb, avg_power_w)
        WHERE provider_id = ANY(${ids}::uuid[])`.execute(trx);
    });
  }
  return ids.length < limit ? null : ids.at(-1)!;
}

/** The price per GB of VRAM-hour of an offer: its price per GPU-hour over its smallest VRAM (a GPU of none: 1 MB). */
const vramPriceSql = sql`round(o.price_per_gpu_hour * 1024 / greatest(o.vram_mb, 1), ${sql.lit(VRAM_PRICE_SCALE)})`;

/** The column (or expression) a sort key orders by, and the type a cursor's value is read as. */
function sortColumn(key: OfferSortKey): { column: RawBuilder<unknown>; type: RawBuilder<unknown> } {
  if (key === 'reliability') return { column: sql`o.reliability`, type: sql`float8` };
  if (key === 'bid_floor') return { column: sql`o.bid_floor`, type: sql`numeric` };
  return { column: key === 'price' ? sql`o.price_per_gpu_hour` : vramPriceSql, type: sql`numeric` };
}

/** The condition that a row comes after the cursor in the sort's order. */
function afterCursor(cursor: OfferCursor): RawBuilder<boolean> {
  const { key, descending } = offerSortOf(cursor.sort);
  const { column, type } = sortColumn(key);
  const row = sql`(${column}, o.provider_id, o.model_key)`;
  const at = sql`(${cursor.value}::${type}, ${cursor.providerId}::uuid, ${cursor.modelKey}::text)`;
  return descending ? sql<boolean>`${row} < ${at}` : sql<boolean>`${row} > ${at}`;
}

/** A page of the market (`limit + 1` rows: the caller learns whether more follow). */
export async function searchOffers(db: Db, f: OfferFilter): Promise<OfferRow[]> {
  const { key, descending } = offerSortOf(f.sort);
  // On the market: a price (billing's card has arrived), and free GPUs unless any group is asked for.
  const where: RawBuilder<boolean>[] = [sql<boolean>`o.price_per_gpu_hour IS NOT NULL`];
  if (f.availability !== 'any') where.push(sql<boolean>`o.free_gpus > 0`);
  if (f.min_gpus !== undefined) where.push(sql<boolean>`o.gpu_count >= ${f.min_gpus}`);
  if (f.max_price !== undefined) where.push(sql<boolean>`o.price_per_gpu_hour <= ${f.max_price}::numeric`);
  // At a bid: machines that take bids (a floor), at most `max_bid`; the floor's sort lists those machines only.
  if (f.max_bid !== undefined) where.push(sql<boolean>`o.bid_floor <= ${f.max_bid}::numeric`);
  else if (key === 'bid_floor') where.push(sql<boolean>`o.bid_floor IS NOT NULL`);
  if (f.min_free_gpus !== undefined) where.push(sql<boolean>`o.free_gpus >= ${f.min_free_gpus}`);
  if (f.gpu_model !== undefined) where.push(sql<boolean>`o.model_key = ${f.gpu_model}`);
  if (f.min_vram !== undefined) where.push(sql<boolean>`o.vram_mb >= ${f.min_vram}`);
  if (f.architecture !== undefined) where.push(sql<boolean>`lower(o.architecture) = lower(${f.architecture})`);
  if (f.min_reliability !== undefined) where.push(sql<boolean>`o.reliability >= ${f.min_reliability}::float8`);
  if (f.min_driver_version !== undefined) {
    where.push(sql<boolean>`o.driver_version_parts >= ${arrayLiteral(versionParts(f.min_driver_version)!)}::integer[]`);
  }
  if (f.min_compute_capability !== undefined) {
    where.push(
      sql<boolean>`o.compute_capability_parts >= ${arrayLiteral(versionParts(f.min_compute_capability)!)}::integer[]`,
    );
  }
  if (f.region !== undefined) where.push(sql<boolean>`lower(o.region) = lower(${f.region})`);
  if (f.min_disk !== undefined) where.push(sql<boolean>`o.disk_mb >= ${f.min_disk}`);
  if (f.after) where.push(afterCursor(f.after));
  const dir = sql.raw(descending ? 'DESC' : 'ASC');
  const { column } = sortColumn(key);
  const order = sql`${column} ${dir}, o.provider_id ${dir}, o.model_key ${dir}`;
  const sortValue = key === 'reliability' ? sql`o.reliability::text` : sql`trim_scale(${column})::text`;
  const { rows } = await sql<OfferRow>`
    SELECT o.provider_id, o.model_key, o.gpu_model, o.model_names, o.gpu_count, o.free_gpus, o.min_gpus_per_rental,
      o.vram_mb, o.architecture,
      o.driver_version, o.compute_capability, o.region, o.disk_mb, trim_scale(o.price_per_gpu_hour)::text AS price_per_gpu_hour,
      trim_scale(${vramPriceSql})::text AS price_per_vram_gb_hour,
      offer_price_parts(o.provider_id, o.model_key, o.avg_vram_mb, o.avg_power_w) AS price_parts,
      o.reliability, o.uptime_30d, o.observed_seconds_30d, o.sessions_ended, o.sessions_failed,
      ${interruptibleSql} AS interruptible, ${sortValue} AS sort_value
    FROM offers o
    WHERE ${sql.join(where, sql` AND `)}
    ORDER BY ${order}
    LIMIT ${f.limit + 1}`.execute(db);
  return rows;
}
