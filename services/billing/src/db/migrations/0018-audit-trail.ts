/**
 * Billing XVIII: the audit trail (`audit_events`, @gpu/common's db/audit-trail.ts): every answer of a route that moves
 * money out or changes who gets it (withdrawals, payouts, payout settings, rates), with who, from where, in which
 * request, what and the outcome (`succeeded`, `refused`, `failed`). Append-only in the database: a trigger refuses
 * every UPDATE, TRUNCATE and DELETE but the retention purge's (which sets `audit.purge` for its own transaction).
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const auditTrailMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
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
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`DROP TABLE audit_events`.execute(db);
    await sql`DROP FUNCTION audit_events_append_only()`.execute(db);
  },
};
