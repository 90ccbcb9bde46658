/**
 * SSH keys: the OpenSSH public keys a user registers to reach what they rent with OpenSSH's own client. Each row is
 * one key as its user gave it (`public_key`: its type and data, without the comment, which became `name` unless a name
 * was given), its type and its SHA-256 fingerprint as `ssh-keygen -lf` prints it. A key is registered once per user
 * (`user_id`, `fingerprint` unique); removing one deletes its row. Frozen: never edit, add a new migration.
 */
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE ssh_keys (
      id uuid PRIMARY KEY,
      user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
      name text NOT NULL,
      type text NOT NULL,
      fingerprint text NOT NULL,
      public_key text NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now(),
      CONSTRAINT ssh_keys_name_sane CHECK (name <> '' AND length(name) <= 100),
      CONSTRAINT ssh_keys_fingerprint_sha256 CHECK (fingerprint LIKE 'SHA256:%'),
      CONSTRAINT ssh_keys_one_line CHECK (length(public_key) <= 8192 AND position(E'\n' IN public_key) = 0)
    )`.execute(db);
  await sql`CREATE UNIQUE INDEX ssh_keys_user_fingerprint_key ON ssh_keys (user_id, fingerprint)`.execute(db);
  await sql`CREATE INDEX ssh_keys_user_created_idx ON ssh_keys (user_id, created_at, id)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE ssh_keys`.execute(db);
}
