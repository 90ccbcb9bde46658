/**
 * The rental sessions of providers (`provider_sessions`) and the status write they cause. Every function runs in
 * the caller's transaction, which has locked the provider row first (`lockProviderStatus`), so the sessions of one
 * provider change one writer at a time and the status follows them exactly.
 */
import { sql, type Transaction } from 'kysely';
import type { ProviderStatus } from '../domain/provider.ts';
import type { EventRecording } from '../domain/status-events.ts';
import type { RegistryDB } from './schema.ts';
import { withStatusEvents } from './status-event-sql.ts';
import type { StatusWrite } from './status-repository.ts';

type Trx = Transaction<RegistryDB>;

/**
 * Locks the provider's row; its stored status and owner, or undefined when there is no such provider (or, with
 * `owner`, none of that owner's).
 */
export async function lockProviderStatus(
  trx: Trx,
  providerId: string,
  owner?: string,
): Promise<{ status: ProviderStatus; owner: string } | undefined> {
  let q = trx.selectFrom('providers').select(['status', 'owner_id']).where('id', '=', providerId);
  if (owner !== undefined) q = q.where('owner_id', '=', owner);
  const row = await q.forUpdate().executeTakeFirst();
  return row && { status: row.status as ProviderStatus, owner: row.owner_id };
}

/**
 * Records the session as active (`active` true) or ended. An ended session stays ended: a later "active" for it
 * (a redelivered or late start) changes nothing. Returns whether the session is active now, and whether this call
 * is the one that ended it (the first report of its end: a redelivered end is not).
 */
export async function upsertSession(trx: Trx, providerId: string, sessionId: string, active: boolean) {
  const { rows } = await sql<{ active: boolean; was_active: boolean | null }>`
    WITH before AS (SELECT active FROM provider_sessions WHERE session_id = ${sessionId})
    INSERT INTO provider_sessions (session_id, provider_id, active) VALUES (${sessionId}, ${providerId}, ${active})
    ON CONFLICT (session_id) DO UPDATE
      SET active = provider_sessions.active AND EXCLUDED.active, updated_at = now()
    RETURNING active, (SELECT active FROM before) AS was_active`.execute(trx);
  const row = rows[0]!;
  return { active: row.active, endedNow: !row.active && row.was_active !== false };
}

/** Whether the provider has at least one active session. */
export async function hasActiveSession(trx: Trx, providerId: string): Promise<boolean> {
  const row = await trx
    .selectFrom('provider_sessions')
    .select('session_id')
    .where('provider_id', '=', providerId)
    .where('active', '=', true)
    .limit(1)
    .executeTakeFirst();
  return row !== undefined;
}

/**
 * Moves the provider from `from` to `to` (nothing when its status is not `from`), recording the status event with
 * the change. `last_seen_at` is left alone: a session event says nothing about whether the machine is alive.
 */
export async function moveStatus(
  trx: Trx,
  providerId: string,
  from: ProviderStatus,
  to: ProviderStatus,
  recording: EventRecording | undefined,
): Promise<StatusWrite | undefined> {
  const { rows } = await withStatusEvents<StatusWrite>(
    sql`
    UPDATE providers p SET status = ${to}
    FROM (SELECT id, status FROM providers WHERE id = ${providerId} AND status = ${from} FOR UPDATE) cur
    WHERE p.id = cur.id
    RETURNING p.id, p.owner_id, cur.status AS previous_status, p.status, p.last_seen_at`,
    recording,
  ).execute(trx);
  return rows[0];
}
