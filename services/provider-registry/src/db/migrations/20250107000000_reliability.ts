/**
 * What a machine's reliability is made of, kept as it happens (never by reading history per question):
 *
 * - `providers.status_since`: when the machine entered its current class of status: up (`idle`, `busy`), down
 *   (`offline`, `error`) or neither (`maintenance`, the owner's own time).
 * - `provider_uptime`: per machine and UTC day (the functions run in UTC, whatever the session's time zone), the seconds it spent up and down. A trigger on every status change
 *   that crosses classes (idle↔busy stays up and writes nothing) adds the interval it closes, split by day, and
 *   starts the next one. A machine marked offline by the sweep was last heard from at `last_seen_at`: its up time
 *   ends there and its down time starts there, not at the sweep. Whatever path changes the status (heartbeat, sweep,
 *   explicit update, a rental), the database keeps the books.
 * - `provider_reliability`: per machine, the rental sessions that ended on it and those that ended by the
 *   machine's fault (it went offline, into error or maintenance, or was removed), counted once per session as
 *   billing reports the end.
 * - `provider_reliability_of(id)`: the machine's books over the last 30 days (the day rows and the open interval of
 *   its current status) and its score, uptime × session success, each 1 while unobserved: one function, so a
 *   machine's reliability and the offers sorted by it say the same number.
 *
 * Frozen: Kysely<any> and raw SQL.
 */
import { type Kysely, sql } from 'kysely';

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function up(db: Kysely<any>): Promise<void> {
  // A constant default: existing machines are observed from now on (no rewrite of the table).
  await sql`ALTER TABLE providers ADD COLUMN status_since timestamptz NOT NULL DEFAULT now()`.execute(db);
  await sql`
    CREATE TABLE provider_uptime (
      provider_id uuid NOT NULL REFERENCES providers (id) ON DELETE CASCADE,
      day date NOT NULL,
      up_seconds double precision NOT NULL DEFAULT 0 CHECK (up_seconds >= 0),
      down_seconds double precision NOT NULL DEFAULT 0 CHECK (down_seconds >= 0),
      PRIMARY KEY (provider_id, day)
    )`.execute(db);
  await sql`
    CREATE TABLE provider_reliability (
      provider_id uuid PRIMARY KEY REFERENCES providers (id) ON DELETE CASCADE,
      sessions_ended integer NOT NULL DEFAULT 0 CHECK (sessions_ended >= 0),
      sessions_failed integer NOT NULL DEFAULT 0 CHECK (sessions_failed BETWEEN 0 AND sessions_ended)
    )`.execute(db);
  await sql`
    CREATE FUNCTION provider_status_class(status text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
      SELECT CASE WHEN status IN ('idle', 'busy') THEN 'up' WHEN status IN ('offline', 'error') THEN 'down' END
    $$`.execute(db);
  await sql`
    CREATE FUNCTION providers_track_uptime() RETURNS trigger LANGUAGE plpgsql SET timezone TO 'UTC' AS $$
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
        boundary := LEAST(GREATEST(OLD.last_seen_at, OLD.status_since), now());
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
    $$`.execute(db);
  await sql`
    CREATE FUNCTION provider_reliability_of(p_id uuid)
    RETURNS TABLE (up_seconds float8, down_seconds float8, sessions_ended integer, sessions_failed integer, score float8)
    LANGUAGE sql STABLE SET timezone TO 'UTC' AS $$
      WITH books AS (
        SELECT
          coalesce(u.up, 0) + CASE WHEN provider_status_class(p.status) = 'up' THEN w.open ELSE 0 END AS up,
          coalesce(u.down, 0) + CASE WHEN provider_status_class(p.status) = 'down' THEN w.open ELSE 0 END AS down,
          coalesce(r.sessions_ended, 0) AS ended,
          coalesce(r.sessions_failed, 0) AS failed
        FROM providers p
        CROSS JOIN LATERAL (
          SELECT greatest(0, extract(epoch FROM now() - greatest(p.status_since, now() - interval '30 days')))::float8
            AS open
        ) w
        LEFT JOIN LATERAL (
          SELECT sum(pu.up_seconds)::float8 AS up, sum(pu.down_seconds)::float8 AS down FROM provider_uptime pu
          WHERE pu.provider_id = p.id AND pu.day > current_date - 30
        ) u ON true
        LEFT JOIN provider_reliability r ON r.provider_id = p.id
        WHERE p.id = p_id
      )
      SELECT up, down, ended, failed,
        (CASE WHEN up + down > 0 THEN up / (up + down) ELSE 1 END)
          * (CASE WHEN ended > 0 THEN (ended - failed)::float8 / ended ELSE 1 END)
      FROM books
    $$`.execute(db);
  await sql`
    CREATE TRIGGER providers_uptime BEFORE UPDATE OF status ON providers
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION providers_track_uptime()`.execute(db);
}

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function down(db: Kysely<any>): Promise<void> {
  await sql`DROP TRIGGER providers_uptime ON providers`.execute(db);
  await sql`DROP FUNCTION provider_reliability_of(uuid)`.execute(db);
  await sql`DROP FUNCTION providers_track_uptime()`.execute(db);
  await sql`DROP FUNCTION provider_status_class(text)`.execute(db);
  await sql`DROP TABLE provider_reliability`.execute(db);
  await sql`DROP TABLE provider_uptime`.execute(db);
  await sql`ALTER TABLE providers DROP COLUMN status_since`.execute(db);
}
