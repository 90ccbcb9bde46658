/**
 * Billing XLIII: `port_grants_by_session`, a session's links and browser grants: each new one keeps the session's
 * newest `MAX_GRANTS_PER_SESSION` that hold (domain/reach/port-grants.ts) and deletes the rest, reading the session's
 * rows alone (never more than about that many: each insert trims them) through the index.
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const portGrantsBySessionMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`CREATE INDEX port_grants_by_session ON port_grants (session_id, created_at DESC)`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`DROP INDEX port_grants_by_session`.execute(db);
  },
};
