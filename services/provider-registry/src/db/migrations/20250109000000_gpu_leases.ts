/**
 * Per-GPU leases (issue #28): a rental takes some of a machine's GPUs, not the whole machine.
 *
 * - `providers.min_gpus_per_rental` (1-64, default 1): the smallest group of GPUs a rental may take on the machine,
 *   the owner's setting.
 * - `provider_sessions.gpu_indices`: the GPUs a session holds, by index (their position in the provider's `gpus`
 *   array); null: every GPU of the machine (what a report that names none means).
 * - `gpu_held(provider, index)`: whether an active session holds the GPU.
 * - `offers.unrented_gpus`: the group's healthy GPUs no active session holds; `offers.min_gpus_per_rental`: the
 *   machine's, copied so a search reads one table. `free_gpus` = `offer_free_gpus(status, unrented, minimum)`: the
 *   unrented GPUs while the machine is `idle` and they are at least its minimum, else none. Kept by the database:
 *   `offers_refresh_gpus` (GPU health, a new GPU list) and the status trigger (now also on a change of the minimum)
 *   are replaced to apply it, and a trigger on `provider_sessions` refreshes the group's unrented GPUs
 *   (`offers_refresh_rented`) when a session starts, ends or restates its GPUs.
 *
 * Existing sessions hold every GPU (they were reported before GPUs could be named). Frozen: Kysely<any> and raw SQL.
 */
import { type Kysely, sql } from 'kysely';

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    ALTER TABLE providers ADD COLUMN min_gpus_per_rental integer NOT NULL DEFAULT 1
      CONSTRAINT providers_min_gpus_per_rental_range CHECK (min_gpus_per_rental BETWEEN 1 AND 64)`.execute(db);
  await sql`ALTER TABLE provider_sessions ADD COLUMN gpu_indices integer[]`.execute(db);
  await sql`
    ALTER TABLE offers
      ADD COLUMN unrented_gpus integer NOT NULL DEFAULT 0,
      ADD COLUMN min_gpus_per_rental integer NOT NULL DEFAULT 1`.execute(db);
  // Every session so far holds its whole machine.
  await sql`
    UPDATE offers o SET unrented_gpus = o.healthy_gpus
    WHERE o.healthy_gpus > 0
      AND NOT EXISTS (SELECT 1 FROM provider_sessions s WHERE s.provider_id = o.provider_id AND s.active)`.execute(db);
  await sql`
    ALTER TABLE offers ADD CONSTRAINT offers_unrented_gpus_range
      CHECK (unrented_gpus BETWEEN 0 AND healthy_gpus)`.execute(db);

  await sql`
    CREATE FUNCTION gpu_held(p_id uuid, p_idx integer) RETURNS boolean LANGUAGE sql STABLE AS $$
      SELECT EXISTS (
        SELECT 1 FROM provider_sessions s
        WHERE s.provider_id = p_id AND s.active AND (s.gpu_indices IS NULL OR p_idx = ANY (s.gpu_indices)))
    $$`.execute(db);
  await sql`
    CREATE FUNCTION offer_free_gpus(p_status text, p_unrented integer, p_min integer)
    RETURNS integer LANGUAGE sql IMMUTABLE AS $$
      SELECT CASE WHEN p_status = 'idle' AND p_unrented >= p_min THEN p_unrented ELSE 0 END
    $$`.execute(db);

  // As before, plus the unrented GPUs and the machine's minimum.
  await sql`
    CREATE OR REPLACE FUNCTION offers_refresh_gpus(p_id uuid) RETURNS void LANGUAGE sql AS $$
      UPDATE offers o SET
        gpu_count = a.n,
        healthy_gpus = a.healthy,
        unrented_gpus = a.unrented,
        min_gpus_per_rental = a.min_gpus,
        free_gpus = offer_free_gpus(o.status, a.unrented, a.min_gpus),
        vram_mb = a.min_vram,
        avg_vram_mb = a.avg_vram,
        avg_power_w = a.avg_power,
        price_per_gpu_hour = offer_price(o.provider_id, o.model_key, a.avg_vram, a.avg_power)
      FROM (
        SELECT g.model_key, g.n, g.healthy, g.unrented, g.min_vram,
          (SELECT p.min_gpus_per_rental FROM providers p WHERE p.id = p_id) AS min_gpus,
          CASE WHEN g.healthy > 0 THEN g.vram_sum::numeric / g.healthy ELSE 0 END AS avg_vram,
          CASE WHEN g.healthy > 0 AND g.power_known THEN g.power_sum::numeric / g.healthy ELSE 0 END AS avg_power
        FROM (
          SELECT o2.model_key, count(*)::int AS n, (count(*) FILTER (WHERE gp.is_healthy))::int AS healthy,
            (count(*) FILTER (WHERE gp.is_healthy AND NOT gpu_held(p_id, gp.idx)))::int AS unrented,
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

  // A session started, ended or restated its GPUs: the groups' unrented GPUs, and so their free ones (rows that change
  // only; the price does not depend on rentals).
  await sql`
    CREATE FUNCTION offers_refresh_rented(p_id uuid) RETURNS void LANGUAGE sql AS $$
      UPDATE offers o SET
        unrented_gpus = a.unrented,
        free_gpus = offer_free_gpus(o.status, a.unrented, o.min_gpus_per_rental)
      FROM (
        SELECT o2.model_key, (count(*) FILTER (WHERE gp.is_healthy AND NOT gpu_held(p_id, gp.idx)))::int AS unrented
        FROM offers o2 JOIN gpus gp ON gp.provider_id = o2.provider_id AND gp.model_name = ANY (o2.model_names)
        WHERE o2.provider_id = p_id
        GROUP BY o2.model_key
      ) a
      WHERE o.provider_id = p_id AND o.model_key = a.model_key AND o.unrented_gpus IS DISTINCT FROM a.unrented
    $$`.execute(db);
  await sql`
    CREATE FUNCTION provider_sessions_offer_gpus() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'INSERT' THEN
        IF NEW.active THEN
          PERFORM offers_refresh_rented(NEW.provider_id);
        END IF;
      ELSIF OLD.active IS DISTINCT FROM NEW.active OR OLD.gpu_indices IS DISTINCT FROM NEW.gpu_indices THEN
        PERFORM offers_refresh_rented(NEW.provider_id);
      END IF;
      RETURN NULL;
    END
    $$`.execute(db);
  await sql`
    CREATE TRIGGER provider_sessions_offer_gpus AFTER INSERT OR UPDATE ON provider_sessions
    FOR EACH ROW EXECUTE FUNCTION provider_sessions_offer_gpus()`.execute(db);

  // The machine's status and its minimum decide which unrented GPUs are free (a change of status class also moves its
  // uptime, and so its reliability).
  await sql`
    CREATE OR REPLACE FUNCTION providers_offer_status() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      UPDATE offers o SET
        status = NEW.status,
        min_gpus_per_rental = NEW.min_gpus_per_rental,
        free_gpus = offer_free_gpus(NEW.status, o.unrented_gpus, NEW.min_gpus_per_rental)
      WHERE o.provider_id = NEW.id;
      IF OLD.status IS DISTINCT FROM NEW.status THEN
        PERFORM offers_refresh_reliability(NEW.id);
      END IF;
      RETURN NULL;
    END
    $$`.execute(db);
  await sql`DROP TRIGGER providers_zz_offer_status ON providers`.execute(db);
  await sql`
    CREATE TRIGGER providers_zz_offer_status AFTER UPDATE OF status, min_gpus_per_rental ON providers
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status
                       OR OLD.min_gpus_per_rental IS DISTINCT FROM NEW.min_gpus_per_rental)
    EXECUTE FUNCTION providers_offer_status()`.execute(db);
}

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function down(db: Kysely<any>): Promise<void> {
  await sql`DROP TRIGGER providers_zz_offer_status ON providers`.execute(db);
  await sql`
    CREATE OR REPLACE FUNCTION providers_offer_status() RETURNS trigger LANGUAGE plpgsql AS $$
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
  await sql`DROP TRIGGER provider_sessions_offer_gpus ON provider_sessions`.execute(db);
  await sql`DROP FUNCTION provider_sessions_offer_gpus()`.execute(db);
  await sql`DROP FUNCTION offers_refresh_rented(uuid)`.execute(db);
  await sql`
    CREATE OR REPLACE FUNCTION offers_refresh_gpus(p_id uuid) RETURNS void LANGUAGE sql AS $$
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
  await sql`DROP FUNCTION offer_free_gpus(text, integer, integer)`.execute(db);
  await sql`DROP FUNCTION gpu_held(uuid, integer)`.execute(db);
  await sql`UPDATE offers SET free_gpus = CASE WHEN status = 'idle' THEN healthy_gpus ELSE 0 END`.execute(db);
  await sql`ALTER TABLE offers DROP COLUMN unrented_gpus, DROP COLUMN min_gpus_per_rental`.execute(db);
  await sql`ALTER TABLE provider_sessions DROP COLUMN gpu_indices`.execute(db);
  await sql`ALTER TABLE providers DROP COLUMN min_gpus_per_rental`.execute(db);
}
