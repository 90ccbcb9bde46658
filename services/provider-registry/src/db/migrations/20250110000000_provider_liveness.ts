/**
 * The heartbeat's clock moves out of the provider row (issue #29) into `provider_liveness`: one narrow row per
 * provider with its clock (`last_seen_at`) and a copy of its status.
 *
 * Why: `providers.last_seen_at` was in two of the nine provider indexes, so every heartbeat wrote a new version of the
 * wide provider row and an entry in all nine indexes (seven at a random place), never a HOT update. Now a heartbeat
 * that changes no status writes the narrow row only: a new version (its `last_seen_at` is indexed, so still not HOT)
 * and two index entries, its key and `(status, last_seen_at, provider_id)`, and leaves `providers` alone. The pages
 * keep room (fillfactor 50) so a new version lands on its page.
 *
 * The status copy is what the offline sweep and discovery's `last_seen_at` sorts walk (one index range per status)
 * and what a heartbeat checks, under the narrow row's lock, to know that it changes nothing. The copy of the GPU
 * model summary (`gpu_models`) lets a `last_seen_at` walk with a model term pass over the other providers' rows
 * without probing each (at 1,000,000 providers a model matches about one walked row in nine). Neither copy drifts:
 * triggers on `providers` create the row with the provider (`providers_liveness_insert`) and copy every change of
 * the status or the summary (`providers_liveness_status`); deletion cascades. The repositories that change a status lock the provider row
 * first, then the narrow one (the triggers' order).
 *
 * The uptime trigger's function (the reliability migration) read `OLD.last_seen_at` for a machine the sweep marks
 * offline; it now reads the narrow row. `down` puts the column, its two indexes and that function back.
 *
 * Frozen: Kysely<any> and raw SQL.
 */
import { type Kysely, sql } from 'kysely';

/** `providers_track_uptime`, reading the machine's clock from `last_seen` (an expression of the row `OLD`). */
const trackUptime = (lastSeen: string) => `
    CREATE OR REPLACE FUNCTION providers_track_uptime() RETURNS trigger LANGUAGE plpgsql SET timezone TO 'UTC' AS $$
    DECLARE
      old_class text := provider_status_class(OLD.status);
      boundary timestamptz := now();
      since timestamptz;
    BEGIN
      IF old_class IS NOT DISTINCT FROM provider_status_class(NEW.status) THEN
        RETURN NEW;
      END IF;
      -- Swept offline: the machine was last heard from at last_seen_at.
      IF old_class = 'up' AND NEW.status = 'offline' THEN
        boundary := LEAST(GREATEST(${lastSeen}, OLD.status_since), now());
      END IF;
      -- Only the last 31 days are ever read.
      since := GREATEST(OLD.status_since, now() - interval '31 days');
      IF old_class IS NOT NULL AND boundary > since THEN
        INSERT INTO provider_uptime (provider_id, day, up_seconds, down_seconds)
        SELECT NEW.id, d.day::date,
          CASE WHEN old_class = 'up' THEN d.seconds ELSE 0 END,
          CASE WHEN old_class = 'down' THEN d.seconds ELSE 0 END
        FROM (
          SELECT g AS day,
            extract(epoch FROM LEAST(boundary, g + interval '1 day') - GREATEST(since, g)) AS seconds
          FROM generate_series(date_trunc('day', since), boundary, interval '1 day') AS g
        ) d
        WHERE d.seconds > 0
        ON CONFLICT (provider_id, day) DO UPDATE SET
          up_seconds = provider_uptime.up_seconds + EXCLUDED.up_seconds,
          down_seconds = provider_uptime.down_seconds + EXCLUDED.down_seconds;
      END IF;
      NEW.status_since := boundary;
      RETURN NEW;
    END
    $$`;

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function up(db: Kysely<any>): Promise<void> {
  // Nothing may write providers between the backfill's snapshot and the triggers (a provider registered, or a status
  // changed, by an instance still running would miss its narrow row or its copy for good): the lock holds until the
  // migration commits, as DROP COLUMN's would anyway.
  await sql`LOCK TABLE providers IN SHARE ROW EXCLUSIVE MODE`.execute(db);
  await sql`
    CREATE TABLE provider_liveness (
      provider_id uuid PRIMARY KEY REFERENCES providers (id) ON DELETE CASCADE,
      status text NOT NULL,
      last_seen_at timestamptz NOT NULL DEFAULT now(),
      gpu_models text NOT NULL DEFAULT '||'
    ) WITH (fillfactor = 50)`.execute(db);
  await sql`
    INSERT INTO provider_liveness (provider_id, status, last_seen_at, gpu_models)
    SELECT id, status, last_seen_at, gpu_models FROM providers`.execute(db);
  // The sweep's ranges (one status, silent past the bound) and discovery's last_seen_at sorts (one range per status,
  // merged in order when no status is asked for).
  await sql`
    CREATE INDEX provider_liveness_status_last_seen_idx ON provider_liveness (status, last_seen_at, provider_id)
    `.execute(db);
  await sql`
    CREATE FUNCTION providers_liveness_insert() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO provider_liveness (provider_id, status, gpu_models) VALUES (NEW.id, NEW.status, NEW.gpu_models);
      RETURN NULL;
    END
    $$`.execute(db);
  await sql`
    CREATE TRIGGER providers_liveness_insert AFTER INSERT ON providers
    FOR EACH ROW EXECUTE FUNCTION providers_liveness_insert()`.execute(db);
  // A writer that has set the copy itself (a heartbeat, an explicit status) leaves nothing to copy.
  await sql`
    CREATE FUNCTION providers_liveness_status() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      UPDATE provider_liveness SET status = NEW.status, gpu_models = NEW.gpu_models
      WHERE provider_id = NEW.id
        AND (status IS DISTINCT FROM NEW.status OR gpu_models IS DISTINCT FROM NEW.gpu_models);
      RETURN NULL;
    END
    $$`.execute(db);
  await sql`
    CREATE TRIGGER providers_liveness_status AFTER UPDATE OF status, gpu_models ON providers
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.gpu_models IS DISTINCT FROM NEW.gpu_models)
    EXECUTE FUNCTION providers_liveness_status()`.execute(db);
  await sql
    .raw(trackUptime('(SELECT l.last_seen_at FROM provider_liveness l WHERE l.provider_id = OLD.id)'))
    .execute(db);
  await sql`DROP INDEX providers_status_last_seen_idx`.execute(db);
  await sql`DROP INDEX providers_last_seen_idx`.execute(db);
  await sql`ALTER TABLE providers DROP COLUMN last_seen_at`.execute(db);
}

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function down(db: Kysely<any>): Promise<void> {
  await sql`ALTER TABLE providers ADD COLUMN last_seen_at timestamptz NOT NULL DEFAULT now()`.execute(db);
  await sql`
    UPDATE providers p SET last_seen_at = l.last_seen_at
    FROM provider_liveness l WHERE l.provider_id = p.id`.execute(db);
  await sql`CREATE INDEX providers_last_seen_idx ON providers (last_seen_at, id)`.execute(db);
  await sql`CREATE INDEX providers_status_last_seen_idx ON providers (status, last_seen_at, id)`.execute(db);
  await sql.raw(trackUptime('OLD.last_seen_at')).execute(db);
  await sql`DROP TRIGGER providers_liveness_status ON providers`.execute(db);
  await sql`DROP FUNCTION providers_liveness_status()`.execute(db);
  await sql`DROP TRIGGER providers_liveness_insert ON providers`.execute(db);
  await sql`DROP FUNCTION providers_liveness_insert()`.execute(db);
  await sql`DROP TABLE provider_liveness`.execute(db);
}
