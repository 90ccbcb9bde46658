/**
 * Billing XXXII: a job whose attempt ended on a machine that is still there waits for that attempt's final checkpoint
 * before it is placed again (domain/jobs/follow.ts): `final_checkpoint_until` (null: nothing to wait for). The
 * daemon keeps the workload's checkpoint directory after the workload's end is reported; a next attempt placed at
 * once would start from the periodic checkpoint before it, a whole interval of work lost.
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const finalCheckpointWaitMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`ALTER TABLE jobs ADD COLUMN final_checkpoint_until timestamptz`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`ALTER TABLE jobs DROP COLUMN final_checkpoint_until`.execute(db);
  },
};
