/**
 * Billing XXXI: `port_grants`, a browser's way into a port of a rented workload (domain/reach/port-grants.ts). A
 * `ticket` is the one-time secret of a link its renter made (`POST .../port-links`), good for a minute; a browser that
 * opens the link trades it for a `cookie`, the secret its cookie carries on that session's and port's own host for
 * some hours. Only a secret's SHA-256 is kept. The credential the link was made with (an API key or a sign-in) is kept
 * too: once it is withdrawn, the grant is refused and its open streams end.
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const portGrantsMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`
      CREATE TABLE port_grants (
        secret_hash bytea PRIMARY KEY,
        kind text NOT NULL CHECK (kind IN ('ticket', 'cookie')),
        session_id uuid NOT NULL,
        port integer NOT NULL CHECK (port BETWEEN 1 AND 65535),
        user_id uuid NOT NULL,
        key_id text,
        sign_in_id text,
        expires_at timestamptz NOT NULL,
        created_at timestamptz NOT NULL
      )`.execute(db);
    await sql`CREATE INDEX port_grants_expiry ON port_grants (expires_at)`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`DROP TABLE port_grants`.execute(db);
  },
};
