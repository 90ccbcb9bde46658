/**
 * Offers: what renters search. One row per machine and GPU model key (billing's: the group of its GPUs that a rental
 * takes and billing prices, `H100 80GB HBM3` and `H100 PCIe` alike), kept
 * as the machine, its status, its GPUs' health, its prices and its reliability change, so a search reads one table in
 * index order and never works anything out per row it reads:
 *
 * - `price_card`, `provider_prices`: billing's prices as its events say them (billing owns prices; the registry
 *   keeps the newest it was told, by `occurred_at`): the platform's card (base rates by model key, VRAM and power
 *   rates, each model's demand and supply factors) and a machine's own rates. `repriced_at`: the card every offer was
 *   priced by (its `occurred_at`), once a walk over the market finished.
 * - `offer_price(...)`: a GPU-hour of a group, as billing prices it: (base rate + VRAM GB × VRAM rate + power W ×
 *   power rate) × demand × supply, the machine's own rates before the platform's, the model's before `default`; null
 *   until a card arrived.
 * - The indexes: the market (rows with free GPUs) in each sort order, per model key and per region.
 * - `offers.free_gpus`: the group's healthy GPUs while the machine is `idle`, else none; kept by triggers on the
 *   machine's status and its GPUs' health (`offers_refresh_gpus`: what billing rents and prices, its healthy GPUs). A
 *   row with free GPUs is on the market (the partial indexes).
 * - `offers.reliability` and its parts: `provider_reliability_of` (the reliability migration), refreshed when the
 *   machine's status class changes (the uptime trigger's statement), when one of its sessions ends, and by the
 *   registry's periodic refresh (the 30-day window rolls on).
 *
 * Frozen: Kysely<any> and raw SQL.
 */
import { type Kysely, sql } from 'kysely';

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE TABLE price_card (
      id smallint PRIMARY KEY CHECK (id = 1),
      base_rates jsonb NOT NULL,
      vram_rate_per_gb_hour numeric NOT NULL,
      power_rate_per_watt_hour numeric NOT NULL,
      factors jsonb NOT NULL DEFAULT '{}'::jsonb,
      occurred_at timestamptz NOT NULL,
      repriced_at timestamptz
    )`.execute(db);
  await sql`
    CREATE TABLE provider_prices (
      provider_id uuid PRIMARY KEY REFERENCES providers (id) ON DELETE CASCADE,
      base_rates jsonb NOT NULL,
      vram_rate_per_gb_hour numeric,
      power_rate_per_watt_hour numeric,
      occurred_at timestamptz NOT NULL
    )`.execute(db);
  await sql`
    CREATE TABLE offers (
      provider_id uuid NOT NULL REFERENCES providers (id) ON DELETE CASCADE,
      model_key text NOT NULL,
      gpu_model text NOT NULL,
      model_names text[] NOT NULL,
      gpu_count integer NOT NULL CHECK (gpu_count > 0),
      healthy_gpus integer NOT NULL DEFAULT 0 CHECK (healthy_gpus BETWEEN 0 AND gpu_count),
      free_gpus integer NOT NULL DEFAULT 0 CHECK (free_gpus BETWEEN 0 AND healthy_gpus),
      vram_mb bigint NOT NULL DEFAULT 0,
      avg_vram_mb numeric NOT NULL DEFAULT 0,
      avg_power_w numeric NOT NULL DEFAULT 0,
      architecture text,
      driver_version text NOT NULL,
      driver_version_parts integer[],
      compute_capability text,
      compute_capability_parts integer[],
      region text,
      status text NOT NULL,
      price_per_gpu_hour numeric,
      reliability float8 NOT NULL DEFAULT 1,
      uptime_30d float8,
      observed_seconds_30d float8 NOT NULL DEFAULT 0,
      sessions_ended integer NOT NULL DEFAULT 0,
      sessions_failed integer NOT NULL DEFAULT 0,
      PRIMARY KEY (provider_id, model_key)
    )`.execute(db);
  // The market: rows with free GPUs, in each sort order, and per model key for a search naming a model.
  await sql`CREATE INDEX offers_price_idx ON offers (price_per_gpu_hour, provider_id, model_key) WHERE free_gpus > 0`.execute(
    db,
  );
  await sql`CREATE INDEX offers_reliability_idx ON offers (reliability, provider_id, model_key) WHERE free_gpus > 0`.execute(
    db,
  );
  await sql`
    CREATE INDEX offers_model_price_idx ON offers (model_key, price_per_gpu_hour, provider_id)
    WHERE free_gpus > 0`.execute(db);
  await sql`
    CREATE INDEX offers_model_reliability_idx ON offers (model_key, reliability, provider_id)
    WHERE free_gpus > 0`.execute(db);
  // A search in one region walks that region's offers in price order.
  await sql`
    CREATE INDEX offers_region_price_idx ON offers (lower(region), price_per_gpu_hour, provider_id, model_key)
    WHERE free_gpus > 0`.execute(db);

  await sql`
    CREATE FUNCTION offer_price(p_id uuid, p_model_key text, p_avg_vram_mb numeric, p_avg_power_w numeric)
    RETURNS numeric LANGUAGE sql STABLE AS $$
      SELECT (
        coalesce(pp.base_rates ->> p_model_key, pp.base_rates ->> 'default',
                 c.base_rates ->> p_model_key, c.base_rates ->> 'default', '0')::numeric
        + p_avg_vram_mb / 1024 * coalesce(pp.vram_rate_per_gb_hour, c.vram_rate_per_gb_hour)
        + p_avg_power_w * coalesce(pp.power_rate_per_watt_hour, c.power_rate_per_watt_hour)
      )
      * coalesce(c.factors -> p_model_key ->> 'demand', c.factors -> 'default' ->> 'demand', '1')::numeric
      * coalesce(c.factors -> p_model_key ->> 'supply', c.factors -> 'default' ->> 'supply', '1')::numeric
      FROM price_card c LEFT JOIN provider_prices pp ON pp.provider_id = p_id
      WHERE c.id = 1
    $$`.execute(db);

  // A machine's reliability on its offers: from its books, the one function that works the score out.
  await sql`
    CREATE FUNCTION offers_refresh_reliability(p_id uuid) RETURNS void LANGUAGE sql AS $$
      UPDATE offers o SET
        reliability = r.score,
        uptime_30d = CASE WHEN r.up_seconds + r.down_seconds > 0
          THEN r.up_seconds / (r.up_seconds + r.down_seconds) END,
        observed_seconds_30d = r.up_seconds + r.down_seconds,
        sessions_ended = r.sessions_ended,
        sessions_failed = r.sessions_failed
      FROM provider_reliability_of(p_id) r
      WHERE o.provider_id = p_id
    $$`.execute(db);

  // The machine's status decides whether its healthy GPUs are free (and a change of class moves its uptime).
  await sql`
    CREATE FUNCTION providers_offer_status() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      UPDATE offers o SET
        status = NEW.status,
        free_gpus = CASE WHEN NEW.status = 'idle' THEN o.healthy_gpus ELSE 0 END
      WHERE o.provider_id = NEW.id;
      PERFORM offers_refresh_reliability(NEW.id);
      RETURN NULL;
    END
    $$`.execute(db);
  await sql`
    CREATE TRIGGER providers_zz_offer_status AFTER UPDATE OF status ON providers
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION providers_offer_status()`.execute(db);

  // A group's GPUs as billing rents and prices them: its healthy ones (those of the group's model key), their VRAM and
  // power per GPU (power only when every one reports it: billing then prices the power a renter declares, 0 in an
  // offer), the smallest VRAM of them; and the price that follows. One function for every writer of the group.
  await sql`
    CREATE FUNCTION offers_refresh_gpus(p_id uuid) RETURNS void LANGUAGE sql AS $$
      UPDATE offers o SET
        gpu_count = a.n,
        healthy_gpus = a.healthy,
        free_gpus = CASE WHEN o.status = 'idle' THEN a.healthy ELSE 0 END,
        vram_mb = a.min_vram,
        avg_vram_mb = a.avg_vram,
        avg_power_w = a.avg_power,
        price_per_gpu_hour = offer_price(o.provider_id, o.model_key, a.avg_vram, a.avg_power)
      FROM (
        SELECT g.model_key, g.n, g.healthy, g.min_vram,
          CASE WHEN g.healthy > 0 THEN g.vram_sum::numeric / g.healthy ELSE 0 END AS avg_vram,
          CASE WHEN g.healthy > 0 AND g.power_known THEN g.power_sum::numeric / g.healthy ELSE 0 END AS avg_power
        FROM (
          SELECT o2.model_key, count(*)::int AS n, (count(*) FILTER (WHERE gp.is_healthy))::int AS healthy,
            coalesce(min(gp.vram) FILTER (WHERE gp.is_healthy), min(gp.vram)) AS min_vram,
            coalesce(sum(gp.vram) FILTER (WHERE gp.is_healthy), 0) AS vram_sum,
            coalesce(bool_and(gp.power_consumption IS NOT NULL) FILTER (WHERE gp.is_healthy), false) AS power_known,
            coalesce(sum(gp.power_consumption) FILTER (WHERE gp.is_healthy), 0) AS power_sum
          FROM offers o2 JOIN gpus gp ON gp.provider_id = o2.provider_id AND gp.model_name = ANY (o2.model_names)
          WHERE o2.provider_id = p_id
          GROUP BY o2.model_key
        ) g
      ) a
      WHERE o.provider_id = p_id AND o.model_key = a.model_key
    $$`.execute(db);

  // A GPU's health decides whether it can be rented, and what the group costs.
  await sql`
    CREATE FUNCTION gpus_offer_health() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      PERFORM offers_refresh_gpus(NEW.provider_id);
      RETURN NULL;
    END
    $$`.execute(db);
  await sql`
    CREATE TRIGGER gpus_offer_health AFTER UPDATE OF is_healthy ON gpus
    FOR EACH ROW WHEN (OLD.is_healthy IS DISTINCT FROM NEW.is_healthy)
    EXECUTE FUNCTION gpus_offer_health()`.execute(db);
}

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function down(db: Kysely<any>): Promise<void> {
  await sql`DROP TRIGGER gpus_offer_health ON gpus`.execute(db);
  await sql`DROP FUNCTION gpus_offer_health()`.execute(db);
  await sql`DROP FUNCTION offers_refresh_gpus(uuid)`.execute(db);
  await sql`DROP TRIGGER providers_zz_offer_status ON providers`.execute(db);
  await sql`DROP FUNCTION providers_offer_status()`.execute(db);
  await sql`DROP FUNCTION offers_refresh_reliability(uuid)`.execute(db);
  await sql`DROP FUNCTION offer_price(uuid, text, numeric, numeric)`.execute(db);
  await sql`DROP TABLE offers`.execute(db);
  await sql`DROP TABLE provider_prices`.execute(db);
  await sql`DROP TABLE price_card`.execute(db);
}
