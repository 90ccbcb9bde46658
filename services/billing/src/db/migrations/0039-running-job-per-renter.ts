/**
 * Billing XXXIX: one running session per job **of each renter**. `rental_sessions_running_job` was unique on `job_id`
 * alone, across renters: anyone could start a session under another renter's job ID (a machine's owner sees the
 * `job_id` of the sessions on it) and so refuse that renter's starts (409 `SESSION_ALREADY_RUNNING`), or learn that a
 * session of that name ran. The index is now on `(job_id, user_id)`: job IDs are the renter's own names. A platform
 * job's sessions (`job:<job ID>`, a prefix start-session refuses to everyone but the placer) are the job owner's, so
 * one of them runs at a time as before, and a lookup by `job_id` still walks the index.
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

const RUNNING = sql`WHERE status IN ('active', 'grace_period')`;

export const runningJobPerRenterMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`CREATE UNIQUE INDEX rental_sessions_running_job_new ON rental_sessions (job_id, user_id) ${RUNNING}`.execute(
      db,
    );
    await sql`DROP INDEX rental_sessions_running_job`.execute(db);
    await sql`ALTER INDEX rental_sessions_running_job_new RENAME TO rental_sessions_running_job`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`DROP INDEX rental_sessions_running_job`.execute(db);
    await sql`CREATE UNIQUE INDEX rental_sessions_running_job ON rental_sessions (job_id) ${RUNNING}`.execute(db);
  },
};
