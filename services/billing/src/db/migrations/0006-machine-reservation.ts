/**
 * Billing VI: a session started from the provider registry's record rents the whole machine, so at most one such
 * session runs on a machine at a time. The registry shows the machine `busy` only once billing's `session.started`
 * event reaches it; until then two renters could both find it `idle`. The partial unique index closes that window in
 * billing's own database, across every billing instance: the second start fails the index and is refused
 * (409 PROVIDER_NOT_AVAILABLE). Sessions on declared providers (billing without a registry) reserve nothing.
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const machineReservationMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`ALTER TABLE rental_sessions ADD COLUMN reserves_machine boolean NOT NULL DEFAULT false`.execute(db);
    await sql`CREATE UNIQUE INDEX rental_sessions_running_machine ON rental_sessions (provider_id)
      WHERE reserves_machine AND status IN ('active', 'grace_period')`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`DROP INDEX rental_sessions_running_machine`.execute(db);
    await sql`ALTER TABLE rental_sessions DROP COLUMN reserves_machine`.execute(db);
  },
};
