/**
 * Machine clients of the OAuth 2.0 client-credentials grant: the API gateway,
 * the scheduler, provider daemons and the platform's own services. A secret is
 * stored only as its SHA-256; after a rotation the previous one stays valid
 * until `previous_secret_expires_at`. Frozen: never edit, add a new migration.
 */
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE TABLE clients (
      id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
      name text NOT NULL,
      role text NOT NULL,
      owner_id uuid REFERENCES users (id) ON DELETE CASCADE,
      secret_hash text NOT NULL,
      previous_secret_hash text,
      previous_secret_expires_at timestamptz,
      created_by uuid,
      created_at timestamptz NOT NULL DEFAULT now(),
      rotated_at timestamptz,
      revoked_at timestamptz,
      last_used_at timestamptz,
      CONSTRAINT clients_role_valid CHECK (role IN ('service', 'gateway', 'scheduler', 'daemon')),
      CONSTRAINT clients_daemon_has_owner CHECK ((role = 'daemon') = (owner_id IS NOT NULL)),
      CONSTRAINT clients_name_sane CHECK (name <> '' AND length(name) <= 100)
    )`.execute(db);
  await sql`CREATE UNIQUE INDEX clients_active_name_key ON clients (name) WHERE revoked_at IS NULL`.execute(db);
  await sql`CREATE INDEX clients_owner_idx ON clients (owner_id) WHERE owner_id IS NOT NULL`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE clients`.execute(db);
}
