/**
 * Billing XIV: a spend cap ends its session when the time it paid for runs out, and a session's events can be read
 * over HTTP.
 *
 * - `rental_sessions.cap_ends_at`: when a capped session's cap is spent at its frozen rate (`started_at` +
 *   `spend_cap` / `total_hourly_rate` hours, rounded up to the millisecond); null without a cap. The biller's cap
 *   sweep finds running sessions past it through a partial index. Sessions running at the migration get theirs from
 *   the same formula.
 * - `session_events`: each session event billing records (started, low balance, grace, resumed, completed,
 *   terminated) with its data in the wire shape, for the renter (`user_id`) and the machine's owner
 *   (`provider_owner_id`) to read (`GET /billing/events`) with or without NATS; `id` is the event's `event_id` (the
 *   NATS message's too). Newest first by (`occurred_at`, `id`), purged after `billing.event_retention`.
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export const capDeadlineSessionEventsMigration: Migration = {
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async up(db: Kysely<any>) {
    await sql`ALTER TABLE rental_sessions ADD COLUMN cap_ends_at timestamptz`.execute(db);
    await sql`
      UPDATE rental_sessions
      SET cap_ends_at = started_at + ceil(spend_cap * 3600000 / total_hourly_rate::numeric) * interval '1 millisecond'
      WHERE spend_cap IS NOT NULL AND status IN ('active', 'grace_period')`.execute(db);
    await sql`
      CREATE INDEX rental_sessions_cap_ends ON rental_sessions (cap_ends_at)
      WHERE cap_ends_at IS NOT NULL AND status IN ('active', 'grace_period')`.execute(db);
    await sql`
      CREATE TABLE session_events (
        id uuid PRIMARY KEY,
        session_id uuid NOT NULL,
        user_id uuid NOT NULL,
        provider_owner_id uuid,
        kind text NOT NULL,
        occurred_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        data jsonb NOT NULL
      )`.execute(db);
    await sql`CREATE INDEX session_events_user ON session_events (user_id, occurred_at, id)`.execute(db);
    await sql`
      CREATE INDEX session_events_owner ON session_events (provider_owner_id, occurred_at, id)
      WHERE provider_owner_id IS NOT NULL`.execute(db);
    await sql`CREATE INDEX session_events_session ON session_events (session_id, occurred_at, id)`.execute(db);
    await sql`CREATE INDEX session_events_occurred ON session_events (occurred_at, id)`.execute(db);
  },
  // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
  async down(db: Kysely<any>) {
    await sql`DROP TABLE session_events`.execute(db);
    await sql`ALTER TABLE rental_sessions DROP COLUMN cap_ends_at`.execute(db);
  },
};
