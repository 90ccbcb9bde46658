/**
 * Status writes: explicit status updates, heartbeats and the automatic
 * offline sweep. Each locks the provider row and reports the stored status
 * before and after, so exactly one writer observes each change even with
 * several registry instances; with events on, the same statement records the
 * change's event in the outbox (`status-event-sql.ts`).
 */
import { type Kysely, type RawBuilder, sql } from 'kysely';
import { GPU_METRIC_FIELDS, type GpuFieldType, type GpuMetrics } from '../domain/gpu-fields.ts';
import type { ProviderStatus } from '../domain/provider.ts';
import type { EventRecording } from '../domain/status-events.ts';
import { registryErrors } from '../errors.ts';
import type { RegistryDB } from './schema.ts';
import { isFullyRentedSql, isStale, statusAfterHeartbeatSql, statusAfterRentalSql } from './sql-rules.ts';
import { withStatusEvents } from './status-event-sql.ts';

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

/** `owner_id = $owner` when the write is limited to an owner's machines, else nothing. */
const ofOwner = (owner: string | undefined) => (owner === undefined ? sql`` : sql` AND owner_id = ${owner}`);

/**
 * `UPDATE ... FROM (SELECT ... FOR UPDATE) cur` with the new status expression; with `owner`, only a provider of
 * that owner is written (another owner's reads as absent).
 */
function updateStatus(
  db: Kysely<RegistryDB>,
  id: string,
  next: RawBuilder<unknown>,
  recording: EventRecording | undefined,
  owner?: string,
) {
  return withStatusEvents<StatusRow>(
    sql`
    UPDATE providers p SET status = ${next}, last_seen_at = now()
    FROM (SELECT id, status FROM providers WHERE id = ${id}${ofOwner(owner)} FOR UPDATE) cur
    WHERE p.id = cur.id
    RETURNING p.id, p.owner_id, cur.status AS previous_status, p.status, p.last_seen_at, p.gpu_count`,
    recording,
  ).execute(db);
}

/**
 * Sets the status named by an explicit update and `last_seen_at`; undefined when the provider does not exist (or
 * is not `owner`'s).
 */
export async function setStatus(
  db: Kysely<RegistryDB>,
  id: string,
  status: ProviderStatus,
  recording?: EventRecording,
  owner?: string,
): Promise<StatusWrite | undefined> {
  const { rows } = await updateStatus(db, id, sql`${status}`, recording, owner);
  return rows[0];
}

/**
 * Whether the provider is fully rented (the rental rule's condition, `domain/provider-sessions.ts`); false for a
 * provider that does not exist. Call it under the provider's row lock.
 */
export async function isFullyRented(db: Kysely<RegistryDB>, id: string): Promise<boolean> {
  const { rows } = await isFullyRentedSql(id).execute(db);
  return rows[0]?.fully_rented ?? false;
}

/**
 * Applies the rental rule to the provider (`statusAfterRentalSql`: `idle` -> `busy` once fully rented, `busy` ->
 * `idle` once not), recording the status event with the change; the write, or undefined when the status stays.
 * `last_seen_at` is left alone: a rental says nothing about whether the machine is alive.
 */
export async function applyRentalRule(
  db: Kysely<RegistryDB>,
  id: string,
  recording: EventRecording | undefined,
): Promise<StatusWrite | undefined> {
  const { rows } = await withStatusEvents<StatusWrite>(
    sql`
    UPDATE providers p SET status = cur.next
    FROM (SELECT cur.id, cur.status, ${statusAfterRentalSql} AS next FROM providers cur WHERE cur.id = ${id}
          FOR UPDATE OF cur) cur
    WHERE p.id = cur.id AND cur.next <> cur.status
    RETURNING p.id, p.owner_id, cur.status AS previous_status, p.status, p.last_seen_at`,
    recording,
  ).execute(db);
  return rows[0];
}

/** The column type of each kind of GPU field (as the migrations created the columns). */
const COLUMN_TYPE: Record<GpuFieldType, RawBuilder<unknown>> = {
  text: sql`text`,
  uint8: sql`smallint`,
  percent: sql`smallint`,
  uint32: sql`bigint`,
  uint64: sql`bigint`,
  bool: sql`boolean`,
};

/** Writes the metrics present in `metrics` onto the provider's GPUs at their indexes; absent ones are kept. */
function writeMetrics(db: Kysely<RegistryDB>, id: string, metrics: GpuMetrics[]) {
  const values = sql.join(
    metrics.map(
      (m) =>
        sql`(${m.index}::int, ${sql.join(GPU_METRIC_FIELDS.map((f) => sql`${m[f.name] ?? null}::${COLUMN_TYPE[f.type]}`))})`,
    ),
  );
  const columns = sql.join(GPU_METRIC_FIELDS.map((f) => sql.ref(f.name)));
  const assignments = sql.join(
    GPU_METRIC_FIELDS.map(
      (f) => sql`${sql.ref(f.name)} = COALESCE(${sql.ref(`v.${f.name}`)}, ${sql.ref(`g.${f.name}`)})`,
    ),
  );
  return sql`
    UPDATE gpus g SET ${assignments}
    FROM (VALUES ${values}) AS v(idx, ${columns})
    WHERE g.provider_id = ${id} AND g.idx = v.idx`.execute(db);
}

/**
 * Records a heartbeat: the heartbeat rule (`statusAfterHeartbeatSql`),
 * `last_seen_at` = now, and the supplied metrics on the GPUs at the given
 * indexes, in one statement (no metrics) or one transaction (metrics). An
 * index the provider does not have throws `UnknownGpuIndex` and nothing is
 * written. A GPU's health decides whether it can be rented, so metrics that
 * report health apply the rental rule after them (`applyRentalRule`).
 */
export async function recordHeartbeat(
  db: Kysely<RegistryDB>,
  id: string,
  metrics: GpuMetrics[],
  recording?: EventRecording,
  owner?: string,
): Promise<StatusWrite | undefined> {
  if (metrics.length === 0) {
    const { rows } = await updateStatus(db, id, statusAfterHeartbeatSql, recording, owner);
    return rows[0];
  }
  return db.transaction().execute(async (tx) => {
    const { rows } = await updateStatus(tx, id, statusAfterHeartbeatSql, recording, owner);
    const row = rows[0];
    if (!row) return undefined;
    const outOfRange = metrics.find((m) => m.index >= row.gpu_count);
    if (outOfRange) throw registryErrors.unknownGpuIndex(outOfRange.index, row.gpu_count);
    await writeMetrics(tx, id, metrics);
    if (metrics.some((m) => m.is_healthy !== undefined)) {
      await sql`
        UPDATE providers SET all_healthy = NOT EXISTS (
          SELECT 1 FROM gpus WHERE provider_id = ${id} AND NOT is_healthy)
        WHERE id = ${id}`.execute(tx);
      const rented = await applyRentalRule(tx, id, recording);
      if (rented) return { ...row, status: rented.status };
    }
    return row;
  });
}

/**
 * Records metric-less heartbeats for several providers in one statement (the
 * service groups concurrent heartbeats: `RegistryService.heartbeat`). The rows
 * are locked in ID order, so concurrent batches and instances never deadlock,
 * and each row's status before and after is reported as by `recordHeartbeat`.
 * Each beat names the owner it is limited to (null: any); a provider is written
 * when at least one of its beats may write it. IDs that name no provider (or
 * none the beats may write) are absent from the result.
 */
export async function recordHeartbeats(
  db: Kysely<RegistryDB>,
  beats: { id: string; owner: string | null }[],
  recording?: EventRecording,
): Promise<Map<string, StatusWrite>> {
  const ids = beats.map((b) => b.id);
  const owners = beats.map((b) => b.owner);
  const { rows } = await withStatusEvents<StatusWrite>(
    sql`
    UPDATE providers p SET status = ${statusAfterHeartbeatSql}, last_seen_at = now()
    FROM (
      SELECT id, status FROM providers q
      WHERE id = ANY(${ids}::uuid[]) AND EXISTS (
        SELECT 1 FROM unnest(${ids}::uuid[], ${owners}::text[]) AS b(id, owner)
        WHERE b.id = q.id AND (b.owner IS NULL OR b.owner = q.owner_id))
      ORDER BY id FOR UPDATE) cur
    WHERE p.id = cur.id
    RETURNING p.id, p.owner_id, cur.status AS previous_status, p.status, p.last_seen_at`,
    recording,
  ).execute(db);
  return new Map(rows.map((r) => [r.id, r]));
}

/**
 * Stores `offline` for up to `batch` providers stored in `status` (a state of
 * `AUTO_OFFLINE_FROM`) and silent past the bound, oldest first, and returns
 * them. Rows are locked with SKIP LOCKED and re-checked after locking, so with
 * several instances sweeping at once each provider is returned (and its event
 * recorded) by exactly one of them, and a heartbeat that lands first wins.
 */
export async function sweepOffline(
  db: Kysely<RegistryDB>,
  status: ProviderStatus,
  offlineAfterMs: number,
  batch = 500,
  recording?: EventRecording,
) {
  const { rows } = await withStatusEvents<StatusWrite>(
    sql`
    WITH stale AS (
      SELECT p.id, p.status FROM providers p
      WHERE ${isStale(status, offlineAfterMs)}
      ORDER BY p.last_seen_at
      LIMIT ${batch}
      FOR UPDATE SKIP LOCKED
    )
    UPDATE providers p SET status = 'offline'
    FROM stale WHERE p.id = stale.id
    RETURNING p.id, p.owner_id, stale.status AS previous_status, p.status, p.last_seen_at`,
    recording,
  ).execute(db);
  return rows;
}
