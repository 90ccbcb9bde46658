/**
 * Sliding rate-limit windows: each `rate_limits` row keeps the times of the events it counted in the window before now
 * (`hits`, oldest first, at most the rule's maximum), and whether its last statement refused its event (`refused`), so
 * that a limit holds over every span of its window, where a fixed window let twice the limit through across its edge
 * (the `RateLimiter` of @gpu/common). The rows of the fixed-window version stay as they are: the new version reads one
 * as its `count` events at the start of its window, so a window under way keeps refusing until it ends. While that
 * version's instances drain they go on counting in `count` and `reset_at`, which the new version writes too (the
 * number of events in the window, and when the newest leaves it) but reads only on a row of the old shape: during the
 * deploy a client whose attempts reach both versions may get up to twice a limit. Frozen: never edit, add a new
 * migration.
 */
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    ALTER TABLE rate_limits
      ADD COLUMN hits timestamptz[] NOT NULL DEFAULT '{}',
      ADD COLUMN refused boolean NOT NULL DEFAULT false`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`ALTER TABLE rate_limits DROP COLUMN hits, DROP COLUMN refused`.execute(db);
}
