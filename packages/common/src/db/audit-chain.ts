/**
 * The audit trail chained by hash, as the services' migrations make it (auth's 20261206000000_audit_chain, billing's
 * 0022-audit-chain) from the table of audit-table.ts. Frozen like a migration: a change is a new migration in each
 * service, never an edit here.
 *
 * - Every event carries `seq` (1, 2, 3, … without gaps), `prev_hash` (the previous event's `hash`; 32 zero bytes
 *   before the first) and `hash` = sha256(canonical form of the event ‖ prev_hash), where the canonical form is the
 *   JSON text of `[seq, id, at (UTC, to the microsecond), action, outcome, actor_id, actor_kind, actor_credential,
 *   address, target, details, request_id]` (`audit_event_hash`, the one definition: the insert trigger and the
 *   verification both call it). A BEFORE INSERT trigger sets all three and `at` (the clock when the event joins the
 *   chain, not what the writer says) under a lock of the chain's head (`audit_chain`, one row), in the inserting
 *   transaction: concurrent inserts take turns, and one rolled back leaves no hole.
 * - Rows already there are chained in (`at`, `id`) order by this migration.
 * - Nothing updates an event or truncates the table (a trigger, SQLSTATE 42501, whoever asks). An event may be deleted
 *   only once older than the retention the database holds (`audit_chain.retention`, written by the service's
 *   migration step from `audit.retention`; null: never), and only from the start of the chain: a statement that would
 *   leave an older event behind is refused, and the newest deleted event becomes the chain's anchor (`anchor_seq`,
 *   `anchor_hash`), where verification starts. Who may delete at all is a matter of privileges (db/roles.ts): in a
 *   production set-up only the purge role; the service's own role may insert and read.
 * - The trigger functions are SECURITY DEFINER (they run as the table's owner, who alone writes `audit_chain`).
 *
 * What the database cannot stop (its owner, or a superuser, disabling the triggers and rewriting rows) the chain
 * shows: `verifyAuditChain` (audit-verify.ts) names the first event whose hash, link or place is wrong.
 */
import { type Kysely, sql } from 'kysely';

// biome-ignore lint/suspicious/noExplicitAny: migrations are written against Kysely<any>
export async function chainAuditTable(db: Kysely<any>): Promise<void> {
  await sql`
    CREATE TABLE audit_chain (
      id boolean PRIMARY KEY DEFAULT true CONSTRAINT audit_chain_one_row CHECK (id),
      head_seq bigint NOT NULL,
      head_hash bytea NOT NULL,
      anchor_seq bigint NOT NULL DEFAULT 0,
      anchor_hash bytea NOT NULL,
      retention interval
    )`.execute(db);
  await sql`
    CREATE FUNCTION audit_event_hash(
      seq bigint, id uuid, at timestamptz, action text, outcome text, actor_id uuid, actor_kind text,
      actor_credential text, address text, target text, details jsonb, request_id text, prev_hash bytea
    ) RETURNS bytea LANGUAGE sql STABLE PARALLEL SAFE AS $$
      SELECT sha256(convert_to(jsonb_build_array(
        seq, id, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), action, outcome, actor_id,
        actor_kind, actor_credential, address, target, details, request_id)::text, 'UTF8') || prev_hash)
    $$`.execute(db);
  // The old guard honoured a setting any session could set; it goes before the rows are chained (an UPDATE).
  await sql`DROP TRIGGER audit_events_append_only ON audit_events`.execute(db);
  await sql`DROP TRIGGER audit_events_no_truncate ON audit_events`.execute(db);
  await sql`DROP FUNCTION audit_events_append_only()`.execute(db);
  await sql`ALTER TABLE audit_events ADD COLUMN seq bigint, ADD COLUMN prev_hash bytea, ADD COLUMN hash bytea`.execute(
    db,
  );
  await sql`
    DO $$
    DECLARE
      e record;
      n bigint := 0;
      prev bytea := '\\x0000000000000000000000000000000000000000000000000000000000000000';
    BEGIN
      FOR e IN SELECT * FROM audit_events ORDER BY at, id LOOP
        n := n + 1;
        UPDATE audit_events SET seq = n, prev_hash = prev,
          hash = audit_event_hash(n, e.id, e.at, e.action, e.outcome, e.actor_id, e.actor_kind, e.actor_credential,
                                  e.address, e.target, e.details, e.request_id, prev)
          WHERE id = e.id RETURNING hash INTO prev;
      END LOOP;
      INSERT INTO audit_chain (head_seq, head_hash, anchor_hash)
        VALUES (n, prev, '\\x0000000000000000000000000000000000000000000000000000000000000000');
    END $$`.execute(db);
  await sql`
    ALTER TABLE audit_events ALTER COLUMN seq SET NOT NULL, ALTER COLUMN prev_hash SET NOT NULL,
      ALTER COLUMN hash SET NOT NULL`.execute(db);
  await sql`CREATE UNIQUE INDEX audit_events_seq ON audit_events (seq)`.execute(db);

  await sql`
    CREATE FUNCTION audit_events_chain() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
    AS $$
    DECLARE
      head audit_chain%ROWTYPE;
    BEGIN
      SELECT * INTO head FROM audit_chain FOR UPDATE;
      NEW.seq := head.head_seq + 1;
      NEW.at := clock_timestamp();
      NEW.prev_hash := head.head_hash;
      NEW.hash := audit_event_hash(NEW.seq, NEW.id, NEW.at, NEW.action, NEW.outcome, NEW.actor_id, NEW.actor_kind,
                                   NEW.actor_credential, NEW.address, NEW.target, NEW.details, NEW.request_id,
                                   NEW.prev_hash);
      UPDATE audit_chain SET head_seq = NEW.seq, head_hash = NEW.hash;
      RETURN NEW;
    END $$`.execute(db);
  await sql`
    CREATE TRIGGER audit_events_chain BEFORE INSERT ON audit_events
      FOR EACH ROW EXECUTE FUNCTION audit_events_chain()`.execute(db);

  await sql`
    CREATE FUNCTION audit_events_guard() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
    AS $$
    DECLARE
      keep interval;
    BEGIN
      IF TG_OP = 'DELETE' THEN
        SELECT retention INTO keep FROM audit_chain;
        IF keep IS NOT NULL AND OLD.at < now() - keep THEN
          RETURN OLD;
        END IF;
        RAISE EXCEPTION 'audit_events: event % is kept for %: it cannot be deleted yet',
          OLD.seq, coalesce(keep::text, 'ever') USING ERRCODE = 'insufficient_privilege';
      END IF;
      RAISE EXCEPTION 'audit_events is append-only: % refused', TG_OP USING ERRCODE = 'insufficient_privilege';
    END $$`.execute(db);
  await sql`
    CREATE TRIGGER audit_events_append_only BEFORE UPDATE OR DELETE ON audit_events
      FOR EACH ROW EXECUTE FUNCTION audit_events_guard()`.execute(db);
  await sql`
    CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events
      FOR EACH STATEMENT EXECUTE FUNCTION audit_events_guard()`.execute(db);

  await sql`
    CREATE FUNCTION audit_events_purged() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
    AS $$
    DECLARE
      last_seq bigint;
      last_hash bytea;
    BEGIN
      SELECT seq, hash INTO last_seq, last_hash FROM purged ORDER BY seq DESC LIMIT 1;
      IF last_seq IS NULL THEN
        RETURN NULL;
      END IF;
      IF EXISTS (SELECT 1 FROM audit_events WHERE seq < last_seq) THEN
        RAISE EXCEPTION 'audit_events: only the oldest events may be deleted (event % stays older than %)',
          (SELECT min(seq) FROM audit_events), last_seq USING ERRCODE = 'insufficient_privilege';
      END IF;
      UPDATE audit_chain SET anchor_seq = last_seq, anchor_hash = last_hash WHERE anchor_seq < last_seq;
      RETURN NULL;
    END $$`.execute(db);
  await sql`
    CREATE TRIGGER audit_events_purged AFTER DELETE ON audit_events REFERENCING OLD TABLE AS purged
      FOR EACH STATEMENT EXECUTE FUNCTION audit_events_purged()`.execute(db);
}

/** Undoes `chainAuditTable`: the table as audit-table.ts made it (append-only, the old purge setting). */
// biome-ignore lint/suspicious/noExplicitAny: migrations are written against Kysely<any>
export async function unchainAuditTable(db: Kysely<any>): Promise<void> {
  await sql`DROP TRIGGER audit_events_purged ON audit_events`.execute(db);
  await sql`DROP TRIGGER audit_events_no_truncate ON audit_events`.execute(db);
  await sql`DROP TRIGGER audit_events_append_only ON audit_events`.execute(db);
  await sql`DROP TRIGGER audit_events_chain ON audit_events`.execute(db);
  await sql`DROP FUNCTION audit_events_purged()`.execute(db);
  await sql`DROP FUNCTION audit_events_guard()`.execute(db);
  await sql`DROP FUNCTION audit_events_chain()`.execute(db);
  await sql`ALTER TABLE audit_events DROP COLUMN seq, DROP COLUMN prev_hash, DROP COLUMN hash`.execute(db);
  await sql`DROP FUNCTION audit_event_hash(bigint, uuid, timestamptz, text, text, uuid, text, text, text, text, jsonb, text, bytea)`.execute(
    db,
  );
  await sql`DROP TABLE audit_chain`.execute(db);
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
