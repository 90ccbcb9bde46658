/**
 * Billing XIII: per-GPU leases. A session started from the provider registry's record rents N of the machine's GPUs
 * (addressed by their index in the registry's `gpus` list), no longer the whole machine:
 *
 * - `gpu_leases`: one row per GPU held, keyed by (machine, GPU index), so two holders of one GPU cannot exist, across
 *   every billing instance and under any concurrency (the second insert fails the key). A row is held by a running
 *   session (`session_id`) or by a scheduler's reservation (`reservation_id` until `expires_at`; a start that names the
 *   reservation takes its GPUs over). The session's end deletes its rows in the transaction that ends it.
 * - `rental_sessions.gpu_indices`: the GPUs the session rents (null: a session without a registry, or one started
 *   before this migration, which rented the whole machine).
 * - The one-session-per-machine index of migration VI goes: a machine holds as many sessions as it has GPU groups.
 *   A session running at the migration keeps its whole machine: it holds every index a machine can have (0-63).
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const gpuLeasesMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`ALTER TABLE rental_sessions ADD COLUMN gpu_indices smallint[]`.execute(db);
    await sql`
      CREATE TABLE gpu_leases (
        provider_id uuid NOT NULL,
        gpu_index smallint NOT NULL CHECK (gpu_index BETWEEN 0 AND 63),
        session_id uuid REFERENCES rental_sessions (id) ON DELETE CASCADE,
        reservation_id uuid,
        user_id uuid,
        expires_at timestamptz,
        created_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (provider_id, gpu_index),
        CHECK ((session_id IS NULL) <> (reservation_id IS NULL)),
        CHECK (reservation_id IS NULL OR (expires_at IS NOT NULL AND user_id IS NOT NULL))
      )`.execute(db);
    await sql`CREATE INDEX gpu_leases_session ON gpu_leases (session_id) WHERE session_id IS NOT NULL`.execute(db);
    await sql`
      CREATE INDEX gpu_leases_reservation ON gpu_leases (reservation_id) WHERE reservation_id IS NOT NULL`.execute(db);
    await sql`
      INSERT INTO gpu_leases (provider_id, gpu_index, session_id)
      SELECT s.provider_id, i, s.id
      FROM rental_sessions s CROSS JOIN generate_series(0, 63) AS i
      WHERE s.reserves_machine AND s.status IN ('active', 'grace_period')
      ON CONFLICT DO NOTHING`.execute(db);
    await sql`DROP INDEX rental_sessions_running_machine`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`CREATE UNIQUE INDEX rental_sessions_running_machine ON rental_sessions (provider_id)
      WHERE reserves_machine AND status IN ('active', 'grace_period')`.execute(db);
    await sql`DROP TABLE gpu_leases`.execute(db);
    await sql`ALTER TABLE rental_sessions DROP COLUMN gpu_indices`.execute(db);
  },
};
