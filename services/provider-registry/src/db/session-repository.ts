/**
 * The rental sessions of providers (`provider_sessions`). Every function runs in the caller's transaction, which has
 * locked the provider row first (`lockProviderStatus`), so the sessions of one provider change one writer at a time
 * and the status follows them exactly (the rental rule: `applyRentalRule` in `status-repository.ts`).
 */
import { type Kysely, sql, type Transaction } from 'kysely';
import type { ProviderStatus } from '../domain/provider.ts';
import type { RegistryDB } from './schema.ts';

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
 * Records the session as active (`active` true) or ended, holding `gpuIndices` (null: every GPU of the machine). An
 * ended session stays ended: a later "active" for it (a redelivered or late start) changes nothing. A report of a
 * running session that names GPUs restates them; one that names none keeps those held (the latest named set wins).
 * Returns whether the session is active now, the GPUs it holds, and whether this call is the one that ended it (the
 * first report of its end: a redelivered end is not). The groups' free GPUs follow in the database (the GPU leases
 * migration's trigger).
 */
export async function upsertSession(
  trx: Trx,
  providerId: string,
  sessionId: string,
  active: boolean,
  gpuIndices: readonly number[] | null,
) {
  const { rows } = await sql<{ active: boolean; gpu_indices: number[] | null; was_active: boolean | null }>`
    WITH before AS (SELECT active FROM provider_sessions WHERE session_id = ${sessionId})
    INSERT INTO provider_sessions (session_id, provider_id, active, gpu_indices)
    VALUES (${sessionId}, ${providerId}, ${active}, ${gpuIndices === null ? null : [...gpuIndices]}::integer[])
    ON CONFLICT (session_id) DO UPDATE SET
      active = provider_sessions.active AND EXCLUDED.active,
      gpu_indices = CASE WHEN provider_sessions.active AND EXCLUDED.active
        THEN coalesce(EXCLUDED.gpu_indices, provider_sessions.gpu_indices) ELSE provider_sessions.gpu_indices END,
      updated_at = now()
    RETURNING active, gpu_indices, (SELECT active FROM before) AS was_active`.execute(trx);
  const row = rows[0]!;
  return { active: row.active, gpuIndices: row.gpu_indices, endedNow: !row.active && row.was_active !== false };
}

/**
 * Deletes up to `limit` sessions that ended before `before` (their last report): an ended row only guards against a
 * late "started" for it, which cannot come once billing's redeliveries are over. Returns how many it deleted.
 */
export async function deleteEndedSessions(db: Kysely<RegistryDB>, before: Date, limit: number): Promise<number> {
  const result = await sql`
    DELETE FROM provider_sessions WHERE session_id IN (
      SELECT session_id FROM provider_sessions WHERE NOT active AND updated_at < ${before} LIMIT ${limit})
  `.execute(db);
  return Number(result.numAffectedRows ?? 0);
}
