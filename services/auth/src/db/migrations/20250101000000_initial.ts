/** Users with roles, refresh-token families and published signing keys. Frozen: never edit, add a new migration. */
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE users (
      id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
      email text NOT NULL,
      password_hash text NOT NULL,
      roles text[] NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now(),
      CONSTRAINT users_email_normalised CHECK (email = lower(btrim(email))),
      CONSTRAINT users_roles_valid CHECK (
        cardinality(roles) >= 1 AND roles <@ ARRAY['provider', 'renter', 'admin']::text[]
      )
    )`.execute(db);
  await sql`CREATE UNIQUE INDEX users_email_key ON users (email)`.execute(db);
  await sql`CREATE INDEX users_admins_idx ON users (id) WHERE 'admin' = ANY (roles)`.execute(db);

  await sql`
    CREATE TABLE refresh_tokens (
      id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
      family_id uuid NOT NULL,
      user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
      parent_id uuid,
      token_hash text NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      expires_at timestamptz NOT NULL,
      used_at timestamptz,
      revoked_at timestamptz,
      revoked_reason text
    )`.execute(db);
  await sql`CREATE UNIQUE INDEX refresh_tokens_hash_key ON refresh_tokens (token_hash)`.execute(db);
  await sql`CREATE INDEX refresh_tokens_family_idx ON refresh_tokens (family_id)`.execute(db);
  await sql`CREATE INDEX refresh_tokens_user_idx ON refresh_tokens (user_id)`.execute(db);
  await sql`CREATE INDEX refresh_tokens_expires_idx ON refresh_tokens (expires_at)`.execute(db);

  await sql`
    CREATE TABLE signing_keys (
      kid text PRIMARY KEY,
      alg text NOT NULL,
      public_jwk jsonb NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      retired_at timestamptz
    )`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE signing_keys`.execute(db);
  await sql`DROP TABLE refresh_tokens`.execute(db);
  await sql`DROP TABLE users`.execute(db);
}
