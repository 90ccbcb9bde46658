/**
 * The GPUs billing holds on each machine (`gpu_holds`, its newest statement by version) and the rental sessions whose
 * end the machine's reliability counted (`counted_session_ends`). A writer of a machine's holds runs in the caller's
 * transaction, which has locked the provider row first (`lockProviderStatus`), so its status follows them exactly (the
 * rental rule: `applyRentalRule` in `status-repository.ts`).
 */
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

/**
 * Keeps billing's statement of the machine's held GPUs when it is newer than the one kept (a greater version), and
 * leaves the kept one otherwise (a redelivered or overtaken statement). The GPUs held now and their version, and
 * whether this statement was kept. The groups' free GPUs follow in the database (`gpu_holds_offer_gpus`).
 */
export async function storeGpuHolds(
  trx: Trx,
  providerId: string,
  version: number,
  gpuIndices: readonly number[],
  bids: Readonly<Record<string, string>> = {},
): Promise<{ applied: boolean; version: number; gpuIndices: number[] }> {
  const { rows } = await sql<{ version: string; gpu_indices: number[]; applied: boolean }>`
    WITH stored AS (
      INSERT INTO gpu_holds AS h (provider_id, version, gpu_indices, bids)
      VALUES (${providerId}, ${version}, ${[...gpuIndices]}::integer[], ${JSON.stringify(bids)}::jsonb)
      ON CONFLICT (provider_id) DO UPDATE SET
        version = EXCLUDED.version, gpu_indices = EXCLUDED.gpu_indices, bids = EXCLUDED.bids, updated_at = now()
      WHERE h.version < EXCLUDED.version
      RETURNING version, gpu_indices)
    SELECT version, gpu_indices, true AS applied FROM stored
    UNION ALL
    SELECT version, gpu_indices, false FROM gpu_holds
    WHERE provider_id = ${providerId} AND NOT EXISTS (SELECT 1 FROM stored)`.execute(trx);
  const row = rows[0]!;
  return { applied: row.applied, version: Number(row.version), gpuIndices: row.gpu_indices };
}

/** The GPUs billing holds on the machine, as last stated (none when it never stated any), and the statement's version. */
export async function gpuHoldsOf(
  db: Kysely<RegistryDB> | Trx,
  providerId: string,
): Promise<{ version: number; gpuIndices: number[] }> {
  const row = await db
    .selectFrom('gpu_holds')
    .select(['version', 'gpu_indices'])
    .where('provider_id', '=', providerId)
    .executeTakeFirst();
  return row ? { version: Number(row.version), gpuIndices: row.gpu_indices } : { version: 0, gpuIndices: [] };
}

/** Records that the session's end was counted; false when it was already (a redelivered end). */
export async function markSessionEndCounted(trx: Trx, providerId: string, sessionId: string): Promise<boolean> {
  const { rows } = await sql<{ session_id: string }>`
    INSERT INTO counted_session_ends (session_id, provider_id) VALUES (${sessionId}, ${providerId})
    ON CONFLICT (session_id) DO NOTHING RETURNING session_id`.execute(trx);
  return rows.length > 0;
}

/**
 * Deletes up to `limit` counted ends older than `before`: a mark only guards against a redelivered end, which cannot
 * come once billing's redeliveries are over. Returns how many it deleted.
 */
export async function deleteCountedEnds(db: Kysely<RegistryDB>, before: Date, limit: number): Promise<number> {
  const result = await sql`
    DELETE FROM counted_session_ends WHERE session_id IN (
      SELECT session_id FROM counted_session_ends WHERE counted_at < ${before} LIMIT ${limit})
  `.execute(db);
  return Number(result.numAffectedRows ?? 0);
}
