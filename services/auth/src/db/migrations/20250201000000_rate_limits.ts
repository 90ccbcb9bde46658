/**
 * Rate-limit windows shared by every instance (the `RateLimiter` of @gpu/common counts here). UNLOGGED: counters
 * are cheap to write and may be lost in a crash. Frozen: never edit, add a new migration.
 */
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    CREATE UNLOGGED TABLE rate_limits (
      name text NOT NULL,
      key text NOT NULL,
      count integer NOT NULL,
      reset_at timestamptz NOT NULL,
      PRIMARY KEY (name, key)
    )`.execute(db);
  await sql`CREATE INDEX rate_limits_reset_at ON rate_limits (reset_at)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE rate_limits`.execute(db);
}
