/**
 * Billing XXVII: reach's figures and key (domain/reach/). `session_workloads.reach_bytes_in` / `reach_bytes_out`:
 * the bytes renters sent into and received from the workload through the relay (shown with the workload).
 * `reach_host_key`: the platform's SSH host key for renters' `ssh`, one row, made by the first instance that needs it
 * (every instance then serves the same key, so one known_hosts line holds for all).
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const reachUsageMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`
      ALTER TABLE session_workloads
        ADD COLUMN reach_bytes_in bigint NOT NULL DEFAULT 0,
        ADD COLUMN reach_bytes_out bigint NOT NULL DEFAULT 0`.execute(db);
    await sql`
      CREATE TABLE reach_host_key (
        id smallint PRIMARY KEY CHECK (id = 1),
        private_key text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
      )`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`DROP TABLE reach_host_key`.execute(db);
    await sql`ALTER TABLE session_workloads DROP COLUMN reach_bytes_in, DROP COLUMN reach_bytes_out`.execute(db);
  },
};
