/**
 * Billing XXVI: `reach_links`, which billing instance holds each machine's relay connection (domain/reach/): a
 * renter's stream that reaches another instance is passed on to that one. A row per machine, replaced by the
 * instance that takes a new connection, removed when it closes; `seen_at` is refreshed while it holds (rows of an
 * instance that died are ignored once stale).
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const reachLinksMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`
      CREATE TABLE reach_links (
        provider_id uuid PRIMARY KEY,
        instance_id text NOT NULL,
        url text NOT NULL,
        link_id uuid NOT NULL,
        connected_at timestamptz NOT NULL,
        seen_at timestamptz NOT NULL
      )`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`DROP TABLE reach_links`.execute(db);
  },
};
