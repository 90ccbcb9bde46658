/**
 * Billing XXVIII: jobs (domain/jobs/). A job is what a renter wants run, not where: its terms (GPUs, the most it pays
 * per GPU-hour, a minimum reliability), its workload and its spend cap for all its attempts together. Billing's
 * placer finds it a machine and starts a session for it, whose `job_id` is `job:<the job's ID>` (a name no caller of
 * start-session may use), so at most one session of a job runs (`rental_sessions_running_job`); it follows the
 * session, and queues the job again when its machine fails it. `job_attempts`: each session the job ran as (written
 * before the session is started), with its machine, times, cost and end reason.
 *
 * Frozen: written against Kysely<any>.
 */
import { type Kysely, type Migration, sql } from 'kysely';

export function jobsMigration(scale: number): Migration {
  const money = sql.raw(`numeric(38, ${scale})`);
  return {
    // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
    async up(db: Kysely<any>) {
      await sql`
        CREATE TABLE jobs (
          id uuid PRIMARY KEY,
          user_id uuid NOT NULL,
          wallet_id uuid NOT NULL REFERENCES wallets (id),
          name text,
          idempotency_key text,
          terms jsonb NOT NULL,
          workload jsonb NOT NULL,
          max_attempts integer NOT NULL CHECK (max_attempts > 0),
          retry_on_failure boolean NOT NULL DEFAULT false,
          spend_cap ${money} NOT NULL CHECK (spend_cap > 0),
          state text NOT NULL CHECK (state IN
            ('queued', 'placing', 'running', 'recovering', 'succeeded', 'failed', 'cancelled')),
          reason text,
          attempts integer NOT NULL DEFAULT 0,
          session_id uuid,
          spent ${money} NOT NULL DEFAULT 0,
          place_after timestamptz NOT NULL,
          placing_until timestamptz,
          queued_until timestamptz,
          created_at timestamptz NOT NULL,
          updated_at timestamptz NOT NULL,
          ended_at timestamptz
        )`.execute(db);
      await sql`CREATE INDEX jobs_by_user ON jobs (user_id, created_at DESC, id DESC)`.execute(db);
      // A submit sent again with its Idempotency-Key finds the job it made.
      await sql`CREATE UNIQUE INDEX jobs_idempotency ON jobs (user_id, idempotency_key)
        WHERE idempotency_key IS NOT NULL`.execute(db);
      // What the placer claims (queued and recovering jobs, and placements left unfinished) and what it follows.
      await sql`CREATE INDEX jobs_open ON jobs (state, place_after)
        WHERE state IN ('queued', 'placing', 'running', 'recovering')`.execute(db);
      await sql`
        CREATE TABLE job_attempts (
          job_id uuid NOT NULL REFERENCES jobs (id),
          n integer NOT NULL CHECK (n > 0),
          session_id uuid NOT NULL UNIQUE,
          provider_id uuid NOT NULL,
          started_at timestamptz NOT NULL,
          ended_at timestamptz,
          cost ${money},
          end_reason text,
          PRIMARY KEY (job_id, n)
        )`.execute(db);
      // The attempts the follower settles: those not ended yet.
      await sql`CREATE INDEX job_attempts_open ON job_attempts (started_at) WHERE ended_at IS NULL`.execute(db);
    },
    // biome-ignore lint/suspicious/noExplicitAny: frozen migrations never use the app's current table types
    async down(db: Kysely<any>) {
      await sql`DROP TABLE job_attempts`.execute(db);
      await sql`DROP TABLE jobs`.execute(db);
    },
  };
}
