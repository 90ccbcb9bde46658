/**
 * Billing XL: `jobs.request_hash`, the hash of the submit a job's `Idempotency-Key` came with (method, path and body,
 * as every idempotent route keys it: domain/idempotency.ts). The same key with another body is 409
 * `IDEMPOTENCY_KEY_REUSED`, where it had answered the first job as if it were the one asked for. Jobs submitted
 * before have none and answer as before.
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const jobRequestHashMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`ALTER TABLE jobs ADD COLUMN request_hash text`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`ALTER TABLE jobs DROP COLUMN request_hash`.execute(db);
  },
};
