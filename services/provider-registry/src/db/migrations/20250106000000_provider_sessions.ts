/**
 * The rental sessions the registry knows of per provider (from billing's session events, or billing's calls when
 * it runs without NATS): one row per session, `active` while it runs, and kept with `active = false` once it
 * ended, so a late or redelivered "started" can never bring an ended session back. A provider with an active row
 * is shown `busy` (domain/provider-sessions.ts). The partial index answers "does this provider have an active
 * session?". Frozen: Kysely<any> and raw SQL.
 */
import { type Kysely, sql } from 'kysely';

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE TABLE provider_sessions (
      session_id uuid PRIMARY KEY,
      provider_id uuid NOT NULL REFERENCES providers (id) ON DELETE CASCADE,
      active boolean NOT NULL,
      updated_at timestamptz NOT NULL DEFAULT now()
    )`.execute(db);
  await sql`CREATE INDEX provider_sessions_active ON provider_sessions (provider_id) WHERE active`.execute(db);
}

// biome-ignore lint/suspicious/noExplicitAny: frozen migrations are written against Kysely<any>
export async function down(db: Kysely<any>): Promise<void> {
  await sql`DROP TABLE provider_sessions`.execute(db);
}
