/**
 * Leases of every kind (`provider_sessions`): besides billing's rental sessions, the reservations billing's scheduler
 * makes hold a machine's GPUs for a renter for a short time, so that offers and `free_gpus` count them as taken.
 *
 * - `kind`: `session` (a rental: its end counts in the machine's reliability) or `reservation` (never counted);
 * - `expires_at`: when a reservation ends by itself (null for a session); the registry's sweep ends it then, and the
 *   triggers give its GPUs back to the offers.
 *
 * Frozen: Kysely<any> and raw SQL.
 */
import { type Kysely, sql } from 'kysely';

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function up(db: Kysely<any>): Promise<void> {
  // Constant defaults and a nullable column: no rewrite of the table.
  await sql`
    ALTER TABLE provider_sessions
      ADD COLUMN kind text NOT NULL DEFAULT 'session' CHECK (kind IN ('session', 'reservation')),
      ADD COLUMN expires_at timestamptz`.execute(db);
  await sql`
    CREATE INDEX provider_sessions_expiring ON provider_sessions (expires_at)
    WHERE active AND expires_at IS NOT NULL`.execute(db);
}

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function down(db: Kysely<any>): Promise<void> {
  await sql`DROP INDEX provider_sessions_expiring`.execute(db);
  await sql`ALTER TABLE provider_sessions DROP COLUMN expires_at, DROP COLUMN kind`.execute(db);
}
