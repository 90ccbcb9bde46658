/**
 * The leases of providers (`provider_sessions`): billing's rental sessions and its reservations. Every writer of a
 * provider's leases runs in the caller's transaction, which has locked the provider row first (`lockProviderStatus`),
 * so the leases of one provider change one writer at a time and the status follows them exactly (the rental rule:
 * `applyRentalRule` in `status-repository.ts`).
 */

import type { LeaseKind } from '@gpu/common';
import { type Kysely, sql, type Transaction } from 'kysely';
import type { WriteScope } from '../domain/access.ts';
import type { ProviderStatus } from '../domain/provider.ts';
import type { RegistryDB } from './schema.ts';

type Trx = Transaction<RegistryDB>;

/**
 * Locks the provider's row; its stored status and owner, or undefined when there is no such provider (or, with
 * `scope`, none in it: another owner's, or bound to another daemon).
 */
export async function lockProviderStatus(
  trx: Trx,
  providerId: string,
  scope?: WriteScope,
): Promise<{ status: ProviderStatus; owner: string } | undefined> {
  let q = trx.selectFrom('providers').select(['status', 'owner_id']).where('id', '=', providerId);
  if (scope !== undefined) q = q.where('owner_id', '=', scope.owner);
  const daemon = scope?.daemon;
  if (daemon !== undefined) {
    q = q.where((eb) => eb.or([eb('daemon_client_id', 'is', null), eb('daemon_client_id', '=', daemon)]));
  }
  const row = await q.forUpdate().executeTakeFirst();
  return row && { status: row.status as ProviderStatus, owner: row.owner_id };
}

/** What kind of lease a row is, and when it ends by itself (a reservation). */
export interface LeaseTerms {
  kind: LeaseKind;
  /** When the lease ends by itself; null: when billing reports its end (a session). */
  expiresAt: Date | null;
}

/**
 * Records the lease (a session, or a reservation until `expiresAt`) as active (`active` true) or ended, holding
 * `gpuIndices` (null: every GPU of the machine). An ended lease stays ended: a later "active" for it (a redelivered or
 * late start) changes nothing, and a reservation reported after its expiry is recorded ended. A report of a running
 * lease that names GPUs restates them (and a reservation's new expiry); one that names none keeps those held (the
 * latest named set wins). The kind is the first report's. Returns whether the lease is active now, the GPUs it holds,
 * its kind, and whether this call is the one that ended it (the first report of its end: a redelivered end is not).
 * The groups' free GPUs follow in the database (the GPU leases migration's trigger).
 */
export async function upsertSession(
  trx: Trx,
  providerId: string,
  sessionId: string,
  active: boolean,
  gpuIndices: readonly number[] | null,
  terms: LeaseTerms = { kind: 'session', expiresAt: null },
) {
  const { rows } = await sql<{
    active: boolean;
    gpu_indices: number[] | null;
    kind: LeaseKind;
    was_active: boolean | null;
  }>`
    WITH before AS (SELECT active FROM provider_sessions WHERE session_id = ${sessionId})
    INSERT INTO provider_sessions (session_id, provider_id, active, gpu_indices, kind, expires_at)
    VALUES (${sessionId}, ${providerId},
      ${active} AND (${terms.expiresAt}::timestamptz IS NULL OR ${terms.expiresAt}::timestamptz > now()),
      ${gpuIndices === null ? null : [...gpuIndices]}::integer[], ${terms.kind}, ${terms.expiresAt}::timestamptz)
    ON CONFLICT (session_id) DO UPDATE SET
      active = provider_sessions.active AND EXCLUDED.active,
      gpu_indices = CASE WHEN provider_sessions.active AND EXCLUDED.active
        THEN coalesce(EXCLUDED.gpu_indices, provider_sessions.gpu_indices) ELSE provider_sessions.gpu_indices END,
      expires_at = CASE WHEN provider_sessions.active AND EXCLUDED.active
        THEN coalesce(EXCLUDED.expires_at, provider_sessions.expires_at) ELSE provider_sessions.expires_at END,
      updated_at = now()
    RETURNING active, gpu_indices, kind, (SELECT active FROM before) AS was_active`.execute(trx);
  const row = rows[0]!;
  return {
    active: row.active,
    gpuIndices: row.gpu_indices,
    kind: row.kind,
    endedNow: !row.active && row.was_active !== false,
  };
}

/** Up to `limit` machines with a reservation past its expiry still counted active. */
export async function machinesWithExpiredLeases(db: Kysely<RegistryDB>, limit: number): Promise<string[]> {
  const { rows } = await sql<{ provider_id: string }>`
    SELECT DISTINCT provider_id FROM provider_sessions
    WHERE active AND expires_at IS NOT NULL AND expires_at <= now() LIMIT ${limit}`.execute(db);
  return rows.map((r) => r.provider_id);
}

/** Ends the machine's leases past their expiry (under the provider's lock); how many. */
export async function endExpiredLeases(trx: Trx, providerId: string): Promise<number> {
  const result = await sql`
    UPDATE provider_sessions SET active = false, updated_at = now()
    WHERE provider_id = ${providerId} AND active AND expires_at IS NOT NULL AND expires_at <= now()`.execute(trx);
  return Number(result.numAffectedRows ?? 0);
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
