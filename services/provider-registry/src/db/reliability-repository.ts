/**
 * Reading and keeping a machine's reliability books (`provider_uptime`, `provider_reliability`,
 * `providers.status_since`; the uptime itself is kept by a trigger on status changes: see the reliability
 * migration).
 */
import { type Kysely, sql, type Transaction } from 'kysely';
import { type ReliabilityBooks, UPTIME_WINDOW_DAYS } from '../domain/reliability.ts';
import type { RegistryDB } from './schema.ts';

type Db = Kysely<RegistryDB> | Transaction<RegistryDB>;

/**
 * The machine's books over the window: the days recorded (the first day of the window whole) and the open interval
 * of its current status, clipped to the window. Undefined when there is no such machine. At most 31 day rows.
 */
export async function reliabilityBooks(db: Db, providerId: string): Promise<ReliabilityBooks | undefined> {
  const { rows } = await sql<{
    up: number;
    down: number;
    sessions_ended: number;
    sessions_failed: number;
  }>`
    SELECT
      coalesce(u.up, 0) + CASE WHEN provider_status_class(p.status) = 'up' THEN w.open ELSE 0 END AS up,
      coalesce(u.down, 0) + CASE WHEN provider_status_class(p.status) = 'down' THEN w.open ELSE 0 END AS down,
      coalesce(r.sessions_ended, 0) AS sessions_ended,
      coalesce(r.sessions_failed, 0) AS sessions_failed
    FROM providers p
    CROSS JOIN LATERAL (
      SELECT greatest(0, extract(epoch FROM now() - greatest(p.status_since, now() - make_interval(days => ${UPTIME_WINDOW_DAYS}::int))))::float8 AS open
    ) w
    LEFT JOIN LATERAL (
      SELECT sum(up_seconds)::float8 AS up, sum(down_seconds)::float8 AS down FROM provider_uptime
      WHERE provider_id = p.id AND day > (now() AT TIME ZONE 'UTC')::date - ${UPTIME_WINDOW_DAYS}::int
    ) u ON true
    LEFT JOIN provider_reliability r ON r.provider_id = p.id
    WHERE p.id = ${providerId}`.execute(db);
  const row = rows[0];
  if (!row) return undefined;
  return {
    upSeconds: Number(row.up),
    downSeconds: Number(row.down),
    sessionsEnded: Number(row.sessions_ended),
    sessionsFailed: Number(row.sessions_failed),
  };
}

/** Counts one more session ended on the machine, and whether it ended by the machine's fault. */
export async function countSessionEnd(trx: Transaction<RegistryDB>, providerId: string, fault: boolean) {
  await sql`
    INSERT INTO provider_reliability (provider_id, sessions_ended, sessions_failed)
    VALUES (${providerId}, 1, ${fault ? 1 : 0})
    ON CONFLICT (provider_id) DO UPDATE SET
      sessions_ended = provider_reliability.sessions_ended + 1,
      sessions_failed = provider_reliability.sessions_failed + EXCLUDED.sessions_failed`.execute(trx);
}
