/**
 * Billing 0023: the daemon client a session's machine is bound to (`rental_sessions.provider_client_id`), copied from
 * the provider registry's record when the session starts and moved by the registry's `provider.daemon_bound` events:
 * a daemon reports usage and workload states, and takes file grants, only for the sessions of the machine bound to
 * it (`domain/access.ts`, `mayReportUsage`). Null: the machine was bound to no daemon (or billing runs without a
 * registry, or the session started before this migration): any daemon of the machine's owner, as before. Nullable
 * without a default: no rewrite of the table.
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const sessionDaemonClientMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    // The ALTER waits for running sessions' row locks: give up after 10 s rather than hold every session write
    // behind it (the start fails and is retried; the migration is all or nothing).
    await sql`SET LOCAL lock_timeout = '10s'`.execute(db);
    await sql`ALTER TABLE rental_sessions ADD COLUMN provider_client_id text`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`ALTER TABLE rental_sessions DROP COLUMN provider_client_id`.execute(db);
  },
};
