/**
 * API keys: a user's keys for their programs, each with scopes (`@gpu/common`'s `SCOPES`) and an optional expiry.
 * The secret is stored only as its SHA-256 (as client secrets are); `prefix` is the start of the key, shown in
 * listings so a user can tell their keys apart. A name is unique among a user's keys not revoked. Frozen: never edit,
 * add a new migration.
 */
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE api_keys (
      id uuid PRIMARY KEY,
      user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
      name text NOT NULL,
      prefix text NOT NULL,
      secret_hash text NOT NULL,
      scopes text[] NOT NULL,
      expires_at timestamptz,
      created_at timestamptz NOT NULL DEFAULT now(),
      last_used_at timestamptz,
      revoked_at timestamptz,
      CONSTRAINT api_keys_name_sane CHECK (name <> '' AND length(name) <= 100),
      CONSTRAINT api_keys_scoped CHECK (cardinality(scopes) > 0)
    )`.execute(db);
  await sql`CREATE UNIQUE INDEX api_keys_active_name_key ON api_keys (user_id, name) WHERE revoked_at IS NULL`.execute(
    db,
  );
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE api_keys`.execute(db);
}
