/**
 * The `audit_events` table (audit-trail.ts), as the services' migrations create it (auth's 20261205000000_audit_trail,
 * billing's 0018-audit-trail). Frozen like a migration: databases already made it with this DDL, so a change to the
 * table is a new migration in each service, never an edit here.
 *
 * Append-only in the database itself: a trigger refuses every UPDATE, every TRUNCATE and every DELETE but one in a
 * transaction that set `audit.purge`, with SQLSTATE 42501. Any session could set it, so the services' next migration
 * replaces that guard: audit-chain.ts (a chain by hash, deletion only past the retention, by a role allowed to).
 */
import { type Kysely, sql } from 'kysely';

// biome-ignore lint/suspicious/noExplicitAny: migrations are written against Kysely<any>
export async function createAuditTable(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE TABLE audit_events (
      id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
      at timestamptz NOT NULL DEFAULT clock_timestamp(),
      action text NOT NULL,
      outcome text NOT NULL,
      actor_id uuid,
      actor_kind text,
      actor_credential text,
      address text,
      target text,
      details jsonb NOT NULL DEFAULT '{}',
      request_id text,
      CONSTRAINT audit_events_outcome CHECK (outcome IN ('succeeded', 'refused', 'failed'))
    )`.execute(db);
  await sql`CREATE INDEX audit_events_at ON audit_events (at, id)`.execute(db);
  await sql`CREATE INDEX audit_events_actor ON audit_events (actor_id, at)`.execute(db);
  await sql`CREATE INDEX audit_events_action ON audit_events (action, at)`.execute(db);
  await sql`
    CREATE FUNCTION audit_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'DELETE' AND current_setting('audit.purge', true) = 'on' THEN
        RETURN OLD;
      END IF;
      RAISE EXCEPTION 'audit_events is append-only: % refused', TG_OP USING ERRCODE = 'insufficient_privilege';
    END $$`.execute(db);
  await sql`
    CREATE TRIGGER audit_events_append_only BEFORE UPDATE OR DELETE ON audit_events
      FOR EACH ROW EXECUTE FUNCTION audit_events_append_only()`.execute(db);
  await sql`
    CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events
      FOR EACH STATEMENT EXECUTE FUNCTION audit_events_append_only()`.execute(db);
}

/** Drops `audit_events` and its trigger function: a migration's `down`. */
// biome-ignore lint/suspicious/noExplicitAny: migrations are written against Kysely<any>
export async function dropAuditTable(db: Kysely<any>): Promise<void> {
  await sql`DROP TABLE IF EXISTS audit_events`.execute(db);
  await sql`DROP FUNCTION IF EXISTS audit_events_append_only()`.execute(db);
}
