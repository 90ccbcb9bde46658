/**
 * Billing XXXVIII: `session_workloads.final_checkpoint_at`, when the machine's daemon said the ended workload's final
 * checkpoint (kept, or none). A job's attempt settled after that (its placer slower than the daemon) does not wait
 * for a final checkpoint already said: before, it waited `jobs.final_checkpoint_wait` for nothing.
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const finalCheckpointSaidMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`ALTER TABLE session_workloads ADD COLUMN final_checkpoint_at timestamptz`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`ALTER TABLE session_workloads DROP COLUMN final_checkpoint_at`.execute(db);
  },
};
