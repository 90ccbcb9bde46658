/**
 * Accounts that recover: when a user's address was verified (`users.email_verified_at`), and the single-use tokens
 * mailed to verify an address or reset a password, stored only as their SHA-256 with the address they were mailed to
 * (a token for an address the account no longer has does nothing). Frozen: never edit, add a new migration.
 */
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE users ADD COLUMN email_verified_at timestamptz`.execute(db);
  await sql`
    CREATE TABLE email_tokens (
      id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
      user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
      purpose text NOT NULL,
      token_hash text NOT NULL UNIQUE,
      email text NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      expires_at timestamptz NOT NULL,
      used_at timestamptz,
      CONSTRAINT email_tokens_purpose CHECK (purpose IN ('verify_email', 'reset_password'))
    )`.execute(db);
  await sql`CREATE INDEX email_tokens_user ON email_tokens (user_id, purpose)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE email_tokens`.execute(db);
  await sql`ALTER TABLE users DROP COLUMN email_verified_at`.execute(db);
}
