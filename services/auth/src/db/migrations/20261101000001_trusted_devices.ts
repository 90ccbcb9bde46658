/**
 * Trusted devices (OWASP "device cookies"): a client that logged in to an
 * account before holds a token for it and is not subject to that account's
 * lockout, which targets guessing from unknown clients. Stored as SHA-256.
 * Frozen: never edit, add a new migration.
 */
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE trusted_devices (
      id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
      user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
      token_hash text NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      last_used_at timestamptz NOT NULL DEFAULT now(),
      expires_at timestamptz NOT NULL
    )`.execute(db);
  await sql`CREATE UNIQUE INDEX trusted_devices_hash_key ON trusted_devices (token_hash)`.execute(db);
  await sql`CREATE INDEX trusted_devices_user_idx ON trusted_devices (user_id)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE trusted_devices`.execute(db);
}
