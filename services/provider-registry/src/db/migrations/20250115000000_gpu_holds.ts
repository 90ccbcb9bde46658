/**
 * One owner for which GPUs are free: billing. The registry no longer keeps its own copy of billing's leases (one row
 * per session and reservation, with their expiries, swept here): it keeps, per machine, the GPUs billing said are held
 * and the version of billing's statement (`gpu_holds`). Billing states a machine's held GPUs after each change of its
 * leases, a start, an end, a reservation made, used, cancelled or lapsed, with a version that grows with each
 * statement; the registry keeps the newest, whatever order they arrive in (domain/gpu-holds.ts).
 *
 * - `gpu_holds (provider_id, version, gpu_indices)`: the GPUs held, by index in the provider's `gpus` array.
 * - `counted_session_ends (session_id)`: the rental sessions whose end the machine's reliability has counted, so a
 *   redelivered end is counted once (kept `sessions.retention`).
 *
 * The leases active now become each machine's held GPUs at version 0 (a session that named none held every GPU; a
 * reservation past its expiry holds none), so billing's first statement (version 1) replaces them; the ended sessions
 * become counted ends. `provider_sessions`, its trigger and function go; `gpu_held` reads `gpu_holds`
 * (definitions.ts, applied after the migrations). Frozen: Kysely<any> and raw SQL.
 */
import { type Kysely, sql } from 'kysely';

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE TABLE gpu_holds (
      provider_id uuid PRIMARY KEY REFERENCES providers (id) ON DELETE CASCADE,
      version bigint NOT NULL CHECK (version >= 0),
      gpu_indices integer[] NOT NULL,
      updated_at timestamptz NOT NULL DEFAULT now()
    )`.execute(db);
  await sql`
    CREATE TABLE counted_session_ends (
      session_id uuid PRIMARY KEY,
      provider_id uuid NOT NULL,
      counted_at timestamptz NOT NULL DEFAULT now()
    )`.execute(db);
  await sql`CREATE INDEX counted_session_ends_counted_at ON counted_session_ends (counted_at)`.execute(db);
  await sql`
    INSERT INTO gpu_holds (provider_id, version, gpu_indices)
    SELECT s.provider_id, 0, array_agg(DISTINCT g.idx ORDER BY g.idx)
    FROM provider_sessions s
    JOIN gpus g ON g.provider_id = s.provider_id AND (s.gpu_indices IS NULL OR g.idx = ANY (s.gpu_indices))
    WHERE s.active AND (s.expires_at IS NULL OR s.expires_at > now())
    GROUP BY s.provider_id`.execute(db);
  await sql`
    INSERT INTO counted_session_ends (session_id, provider_id, counted_at)
    SELECT session_id, provider_id, updated_at FROM provider_sessions WHERE NOT active AND kind = 'session'`.execute(
    db,
  );
  await sql`DROP TRIGGER provider_sessions_offer_gpus ON provider_sessions`.execute(db);
  await sql`DROP FUNCTION provider_sessions_offer_gpus()`.execute(db);
  await sql`DROP TABLE provider_sessions`.execute(db);
  // Until definitions.ts takes it over: the GPUs billing says are held.
  await sql`
    CREATE OR REPLACE FUNCTION gpu_held(p_id uuid, p_idx integer) RETURNS boolean LANGUAGE sql STABLE AS $$
      SELECT EXISTS (SELECT 1 FROM gpu_holds h WHERE h.provider_id = p_id AND p_idx = ANY (h.gpu_indices))
    $$`.execute(db);
}

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function down(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE TABLE provider_sessions (
      session_id uuid PRIMARY KEY,
      provider_id uuid NOT NULL REFERENCES providers (id) ON DELETE CASCADE,
      active boolean NOT NULL,
      updated_at timestamptz NOT NULL DEFAULT now(),
      gpu_indices integer[],
      kind text NOT NULL DEFAULT 'session' CHECK (kind IN ('session', 'reservation')),
      expires_at timestamptz
    )`.execute(db);
  await sql`CREATE INDEX provider_sessions_active ON provider_sessions (provider_id) WHERE active`.execute(db);
  await sql`
    CREATE INDEX provider_sessions_expiring ON provider_sessions (expires_at)
    WHERE active AND expires_at IS NOT NULL`.execute(db);
  // Each machine's held GPUs as one session of unknown ID holding them.
  await sql`
    INSERT INTO provider_sessions (session_id, provider_id, active, gpu_indices)
    SELECT gen_random_uuid(), provider_id, true, gpu_indices FROM gpu_holds WHERE cardinality(gpu_indices) > 0`.execute(
    db,
  );
  await sql`
    INSERT INTO provider_sessions (session_id, provider_id, active, updated_at)
    SELECT session_id, provider_id, false, counted_at FROM counted_session_ends
    WHERE provider_id IN (SELECT id FROM providers)`.execute(db);
  await sql`
    CREATE OR REPLACE FUNCTION gpu_held(p_id uuid, p_idx integer) RETURNS boolean LANGUAGE sql STABLE AS $$
      SELECT EXISTS (
        SELECT 1 FROM provider_sessions s
        WHERE s.provider_id = p_id AND s.active AND (s.gpu_indices IS NULL OR p_idx = ANY (s.gpu_indices)))
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
  await sql`DROP TABLE counted_session_ends`.execute(db);
  await sql`DROP TABLE gpu_holds`.execute(db);
}
