/**
 * Billing XVII: what a workload wrote. `session_workloads.outputs`: the objects its daemon uploaded from the
 * workload's output directory at its end (`[{key, bucket, size}]`, keys under the session's output prefix), null until
 * the daemon reported them.
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const workloadOutputsMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`ALTER TABLE session_workloads ADD COLUMN outputs jsonb`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`ALTER TABLE session_workloads DROP COLUMN outputs`.execute(db);
  },
};
