/**
 * Status writes: explicit status updates, heartbeats and the automatic
 * offline sweep. Each locks the provider row and reports the stored status
 * before and after, so exactly one writer observes (and publishes) each
 * change even with several registry instances.
 */
import { type Kysely, type RawBuilder, sql } from 'kysely';
import type { GpuMetrics, ProviderStatus } from '../domain/provider.ts';
import { registryErrors } from '../errors.ts';
import type { RegistryDB } from './schema.ts';
import { isStale, statusAfterHeartbeatSql } from './sql-rules.ts';

export interface StatusWrite {
  id: string;
  owner_id: string;
  previous_status: ProviderStatus;
  status: ProviderStatus;
  last_seen_at: Date;
}

interface StatusRow extends StatusWrite {
  gpu_count: number;
}

/** `UPDATE ... FROM (SELECT ... FOR UPDATE) cur` with the new status expression. */
function updateStatus(db: Kysely<RegistryDB>, id: string, next: RawBuilder<unknown>) {
  return sql<StatusRow>`
    UPDATE providers p SET status = ${next}, last_seen_at = now()
    FROM (SELECT id, status FROM providers WHERE id = ${id} FOR UPDATE) cur
    WHERE p.id = cur.id
    RETURNING p.id, p.owner_id, cur.status AS previous_status, p.status, p.last_seen_at, p.gpu_count`.execute(db);
}

/** Sets the status named by an explicit update and `last_seen_at`; undefined when the provider does not exist. */
export async function setStatus(
  db: Kysely<RegistryDB>,
  id: string,
  status: ProviderStatus,
): Promise<StatusWrite | undefined> {
  const { rows } = await updateStatus(db, id, sql`${status}`);
  return rows[0];
}

/**
 * Records a heartbeat: `offline`/`error` -> `idle`, `last_seen_at` = now, and
 * the supplied metrics on the GPUs at the given indexes, in one statement (no
 * metrics) or one transaction (metrics). An index the provider does not have
 * is a 400 and nothing is written.
 */
export async function recordHeartbeat(
  db: Kysely<RegistryDB>,
  id: string,
  metrics: GpuMetrics[],
): Promise<StatusWrite | undefined> {
  if (metrics.length === 0) {
    const { rows } = await updateStatus(db, id, statusAfterHeartbeatSql);
    return rows[0];
  }
  return db.transaction().execute(async (tx) => {
    const { rows } = await updateStatus(tx, id, statusAfterHeartbeatSql);
    const row = rows[0];
    if (!row) return undefined;
    const outOfRange = metrics.find((m) => m.index >= row.gpu_count);
    if (outOfRange) throw registryErrors.unknownGpuIndex(outOfRange.index, row.gpu_count);
    const values = sql.join(
      metrics.map(
        (m) =>
          sql`(${m.index}::int, ${m.utilization_gpu ?? null}::smallint, ${m.utilization_mem ?? null}::smallint, ${m.temperature ?? null}::smallint, ${m.power_draw ?? null}::bigint, ${m.is_healthy ?? null}::boolean)`,
      ),
    );
    await sql`
      UPDATE gpus g SET
        utilization_gpu = COALESCE(v.ug, g.utilization_gpu),
        utilization_mem = COALESCE(v.um, g.utilization_mem),
        temperature = COALESCE(v.t, g.temperature),
        power_draw = COALESCE(v.pd, g.power_draw),
        is_healthy = COALESCE(v.h, g.is_healthy)
      FROM (VALUES ${values}) AS v(idx, ug, um, t, pd, h)
      WHERE g.provider_id = ${id} AND g.idx = v.idx`.execute(tx);
    if (metrics.some((m) => m.is_healthy !== undefined)) {
      await sql`
        UPDATE providers SET all_healthy = NOT EXISTS (
          SELECT 1 FROM gpus WHERE provider_id = ${id} AND NOT is_healthy)
        WHERE id = ${id}`.execute(tx);
    }
    return row;
  });
}

/**
 * Records metric-less heartbeats for several providers in one statement (the
 * service groups concurrent heartbeats: `RegistryService.heartbeat`). The rows
 * are locked in ID order, so concurrent batches and instances never deadlock,
 * and each row's status before and after is reported as by `recordHeartbeat`.
 * IDs that name no provider are absent from the result.
 */
export async function recordHeartbeats(db: Kysely<RegistryDB>, ids: string[]): Promise<Map<string, StatusWrite>> {
  const { rows } = await sql<StatusWrite>`
    UPDATE providers p SET status = ${statusAfterHeartbeatSql}, last_seen_at = now()
    FROM (SELECT id, status FROM providers WHERE id = ANY(${ids}::uuid[]) ORDER BY id FOR UPDATE) cur
    WHERE p.id = cur.id
    RETURNING p.id, p.owner_id, cur.status AS previous_status, p.status, p.last_seen_at`.execute(db);
  return new Map(rows.map((r) => [r.id, r]));
}

/**
 * Stores `offline` for up to `batch` providers silent past the bound and
 * returns them. Rows are locked with SKIP LOCKED and re-checked after
 * locking, so with several instances sweeping at once each provider is
 * returned by exactly one of them, and a heartbeat that lands first wins.
 */
export async function sweepOffline(db: Kysely<RegistryDB>, offlineAfterMs: number, batch = 500) {
  const { rows } = await sql<StatusWrite>`
    WITH stale AS (
      SELECT p.id, p.status FROM providers p
      WHERE ${isStale(offlineAfterMs)}
      ORDER BY p.last_seen_at
      LIMIT ${batch}
      FOR UPDATE SKIP LOCKED
    )
    UPDATE providers p SET status = 'offline'
    FROM stale WHERE p.id = stale.id
    RETURNING p.id, p.owner_id, stale.status AS previous_status, p.status, p.last_seen_at`.execute(db);
  return rows;
}
