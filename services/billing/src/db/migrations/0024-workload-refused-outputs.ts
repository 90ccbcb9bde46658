/**
 * Billing XXIV: what a workload left that was not kept. `session_workloads.outputs_refused`: the files under its
 * output directory its daemon did not upload, each with why (`[{path, reason}]`: a link, too large, a name storage
 * cannot hold, the store refused it), null until the daemon reported its outputs.
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const workloadRefusedOutputsMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`ALTER TABLE session_workloads ADD COLUMN outputs_refused jsonb`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`ALTER TABLE session_workloads DROP COLUMN outputs_refused`.execute(db);
  },
};
