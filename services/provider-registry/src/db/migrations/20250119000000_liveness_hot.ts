/**
 * A heartbeat as a heap-only write (issue #55): the narrow liveness row's clock leaves every index, and the row gains
 * copies of the machine's owner and bound daemon, so that the heartbeat's statement reads and writes that row alone.
 *
 * Why: `(status, last_seen_at, provider_id)` indexed the clock, so no heartbeat could be a HOT (heap-only) update: each
 * wrote a new index entry in both of the table's indexes, and checked its sender against the wide provider row. On
 * Debian's PostgreSQL 15 at 1,000,000 providers, a batch of 901 heartbeats cost the database 36-39 µs of CPU each; the
 * narrow row alone with the owner's copy 24 µs with the clock indexed and 14 µs without (each update then heap-only).
 *
 * What it costs: nothing orders the narrow rows by their clock any more. The offline sweep reads every narrow row once
 * per sweep (one statement for every state that falls offline, about 150 ms of one core at a million rows), and
 * discovery's `last_seen_at` sorts read every narrow row of the asked statuses and keep the page (a top-N sort): both
 * stay exact. The status keeps an index of its own (`provider_liveness_status_idx`), which a heartbeat never changes.
 *
 * The copies never drift: the migration takes the table lock, fills them, and replaces the two trigger functions that
 * keep the narrow row (definitions.ts holds their current text, as here) so that every later change of the owner or
 * the daemon binding is copied in the same statement. Frozen: Kysely<any> and raw SQL.
 */
import { type Kysely, sql } from 'kysely';

const insertCopy = (columns: string[]) => `
    CREATE OR REPLACE FUNCTION providers_liveness_insert() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO provider_liveness (provider_id, ${columns.join(', ')})
      VALUES (NEW.id, ${columns.map((c) => `NEW.${c}`).join(', ')});
      RETURN NULL;
    END
    $$`;

const followCopy = (columns: string[]) => `
    CREATE OR REPLACE FUNCTION providers_liveness_status() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      UPDATE provider_liveness SET ${columns.map((c) => `${c} = NEW.${c}`).join(', ')}
      WHERE provider_id = NEW.id
        AND (${columns.map((c) => `${c} IS DISTINCT FROM NEW.${c}`).join(' OR ')});
      RETURN NULL;
    END
    $$`;

const followTrigger = (columns: string[]) => `
    CREATE TRIGGER providers_liveness_status AFTER UPDATE OF ${columns.join(', ')} ON providers
    FOR EACH ROW WHEN (${columns.map((c) => `OLD.${c} IS DISTINCT FROM NEW.${c}`).join(' OR ')})
    EXECUTE FUNCTION providers_liveness_status()`;

const BEFORE = ['status', 'gpu_models'];
const AFTER = ['status', 'gpu_models', 'owner_id', 'daemon_client_id'];

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function up(db: Kysely<any>): Promise<void> {
  // Nothing may change an owner or a binding between the backfill and the new triggers.
  await sql`LOCK TABLE providers IN SHARE ROW EXCLUSIVE MODE`.execute(db);
  await sql`ALTER TABLE provider_liveness ADD COLUMN owner_id text, ADD COLUMN daemon_client_id text`.execute(db);
  await sql`
    UPDATE provider_liveness l SET owner_id = p.owner_id, daemon_client_id = p.daemon_client_id
    FROM providers p WHERE p.id = l.provider_id`.execute(db);
  await sql`ALTER TABLE provider_liveness ALTER COLUMN owner_id SET NOT NULL`.execute(db);
  await sql.raw(insertCopy(AFTER)).execute(db);
  await sql.raw(followCopy(AFTER)).execute(db);
  await sql`DROP TRIGGER providers_liveness_status ON providers`.execute(db);
  await sql.raw(followTrigger(AFTER)).execute(db);
  await sql`DROP INDEX provider_liveness_status_last_seen_idx`.execute(db);
  await sql`CREATE INDEX provider_liveness_status_idx ON provider_liveness (status)`.execute(db);
}

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function down(db: Kysely<any>): Promise<void> {
  await sql`DROP INDEX provider_liveness_status_idx`.execute(db);
  await sql`
    CREATE INDEX provider_liveness_status_last_seen_idx ON provider_liveness (status, last_seen_at, provider_id)
    `.execute(db);
  await sql`DROP TRIGGER providers_liveness_status ON providers`.execute(db);
  await sql.raw(followTrigger(BEFORE)).execute(db);
  await sql.raw(followCopy(BEFORE)).execute(db);
  await sql.raw(insertCopy(BEFORE)).execute(db);
  await sql`ALTER TABLE provider_liveness DROP COLUMN owner_id, DROP COLUMN daemon_client_id`.execute(db);
}
