/**
 * Billing XVI: workloads. A session may carry what it runs (`session_workloads`); billing then charges only while it
 * runs.
 *
 * - `rental_sessions.workload`: whether the session runs a workload (false for every session before);
 * - `rental_sessions.billed_from`: when billing's clock started for a workload session (its workload reported
 *   `running`; null until then). A session without a workload is billed from `started_at`, as before;
 * - `session_workloads`: the workload's spec (the platform's `workloadSpecSchema`), its state (`pending`, `preparing`,
 *   `running`, then `exited` with `exit_code`, `failed` or `stopped` with `reason`) and when it reached each. One per
 *   session, kept with it. An index finds the workloads still waiting to run (the start deadline's sweep).
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const workloadsMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`
      ALTER TABLE rental_sessions
        ADD COLUMN workload boolean NOT NULL DEFAULT false,
        ADD COLUMN billed_from timestamptz`.execute(db);
    await sql`
      CREATE TABLE session_workloads (
        session_id uuid PRIMARY KEY REFERENCES rental_sessions (id),
        spec jsonb NOT NULL,
        state text NOT NULL
          CHECK (state IN ('pending', 'preparing', 'running', 'exited', 'failed', 'stopped')),
        exit_code integer,
        reason text,
        created_at timestamptz NOT NULL,
        preparing_at timestamptz,
        running_at timestamptz,
        ended_at timestamptz,
        updated_at timestamptz NOT NULL
      )`.execute(db);
    await sql`
      CREATE INDEX session_workloads_waiting ON session_workloads (created_at)
      WHERE state IN ('pending', 'preparing')`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`DROP TABLE session_workloads`.execute(db);
    await sql`ALTER TABLE rental_sessions DROP COLUMN billed_from, DROP COLUMN workload`.execute(db);
  },
};
