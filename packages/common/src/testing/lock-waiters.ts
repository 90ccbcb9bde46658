/**
 * Interleavings made on purpose: a test holds a row that a request under way needs, and lets it go once the requests
 * it wants to race wait for it too (seen in `pg_stat_activity`), never after a guessed sleep.
 */
import { type Kysely, sql } from 'kysely';

/**
 * Resolves once `n` of the database's connections wait for a lock (a generous deadline, then fails saying so); with
 * `blockedBy` (a connection's `pg_backend_pid()`: the test's own transaction), only those it holds up count, so that
 * a service's background work waiting on locks of its own does not pass for the requests raced.
 */
export async function lockWaiters<DB>(
  db: Kysely<DB>,
  n: number,
  opts: { blockedBy?: number; deadlineMs?: number } = {},
): Promise<void> {
  const deadline = Date.now() + (opts.deadlineMs ?? 20_000);
  const by = opts.blockedBy === undefined ? sql`` : sql`AND ${opts.blockedBy}::int = ANY(pg_blocking_pids(pid))`;
  for (;;) {
    const { rows } = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM pg_stat_activity
      WHERE datname = current_database() AND wait_event_type = 'Lock' ${by}`.execute(db);
    if (rows[0]!.n >= n) return;
    if (Date.now() > deadline) throw new Error(`${rows[0]!.n} of ${n} connections wait for a lock`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
