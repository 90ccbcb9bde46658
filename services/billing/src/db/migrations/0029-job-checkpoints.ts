/**
 * Billing XXIX: a job's last checkpoint (domain/workloads/files.ts). Each attempt's daemon keeps the job's checkpoint
 * directory as one object of its own in the renter's storage and says so once it is whole: `checkpoint_session` (the
 * attempt's session, which names the object), `checkpoint_size` (bytes) and `checkpoint_at` (when billing heard of
 * it). The last one said is what the next attempt restores.
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const jobCheckpointsMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`ALTER TABLE jobs
      ADD COLUMN checkpoint_session uuid,
      ADD COLUMN checkpoint_size bigint CHECK (checkpoint_size >= 0),
      ADD COLUMN checkpoint_at timestamptz`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`ALTER TABLE jobs DROP COLUMN checkpoint_session, DROP COLUMN checkpoint_size, DROP COLUMN checkpoint_at`.execute(
      db,
    );
  },
};
