/**
 * The audit trail: security-relevant actions (keys, clients, roles, passwords, sign-outs), appended with who, what,
 * when, the outcome and the request. Append-only in the database itself: a trigger refuses every UPDATE and every
 * DELETE but the retention purge's (which sets `audit.purge` for its own transaction), and TRUNCATE. Frozen: never
 * edit, add a new migration.
 */
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
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
      CONSTRAINT audit_events_outcome CHECK (outcome IN ('succeeded', 'refused'))
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

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE audit_events`.execute(db);
  await sql`DROP FUNCTION audit_events_append_only()`.execute(db);
}
