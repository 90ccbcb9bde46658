/**
 * Status writes: explicit status updates, heartbeats and the automatic
 * offline sweep. Each reports the stored status before and after, under the
 * row locks that make exactly one writer observe each change even with several
 * registry instances; with events on, the same statement records the change's
 * event in the outbox (`status-event-sql.ts`).
 *
 * The clock is the narrow `provider_liveness` row's, which carries a copy of
 * the status (the liveness migration): a heartbeat that changes no status
 * writes that row only, under its lock, and never touches `providers`. A
 * writer that changes a status locks the provider row, then the narrow one
 * (providers in ID order), as the triggers that copy the status do; the sweep
 * locks both with SKIP LOCKED and never waits. So the narrow row is where a
 * heartbeat and a status change meet: a heartbeat that finds it locked waits,
 * then sees the status as committed (READ COMMITTED re-checks the row) and,
 * when it now revives the provider, takes the provider-first path.
 */
import { arrayLiteral, forEachLimited, PREPARED_SQL, textArray, uuidArray } from '@gpu/common';
import { type Kysely, type RawBuilder, sql } from 'kysely';
import type { WriteScope } from '../domain/access.ts';
import { GPU_METRIC_FIELDS, type GpuField, type GpuFieldType, type GpuMetrics } from '../domain/gpu-fields.ts';
import type { ProviderStatus } from '../domain/provider.ts';
import type { EventRecording } from '../domain/status-events.ts';
import { registryErrors, UnknownGpuIndex } from '../errors.ts';
import type { RegistryDB } from './schema.ts';
import {
  isFullyRentedSql,
  isSilent,
  keptByHeartbeatSql,
  statusAfterHeartbeatSql,
  statusAfterRentalSql,
} from './sql-rules.ts';
import { withStatusEvents } from './status-event-sql.ts';

export interface StatusWrite {
  id: string;
  owner_id: string;
  /** The daemon client the machine is bound to (null: none). */
  daemon_client_id: string | null;
  previous_status: ProviderStatus;
  status: ProviderStatus;
  last_seen_at: Date;
}

interface StatusRow extends StatusWrite {
  gpu_count: number;
}

/**
 * ` AND <row> is in scope`: the owner's machine, and for a daemon one bound to it or to none (`domain/access.ts`);
 * nothing for an unlimited write.
 */
export function inScope(scope: WriteScope | undefined, row: string): RawBuilder<unknown> {
  if (scope === undefined) return sql``;
  const owner = sql` AND ${sql.ref(`${row}.owner_id`)} = ${scope.owner}`;
  if (scope.daemon === undefined) return owner;
  const bound = sql.ref(`${row}.daemon_client_id`);
  return sql`${owner} AND (${bound} IS NULL OR ${bound} = ${scope.daemon})`;
}

/**
 * The common table expressions of a status write with the clock: `cur` locks the provider rows `where` selects (a
 * condition on `cur`), each followed by its narrow row, in ID order, and computes `next`, the status after (an
 * expression of the locked row `cur`); `moved` writes `providers.status` where it changes; `seen` writes the narrow
 * row (the status copy and the clock, now), after its provider row (it reads `moved`), whose uptime trigger reads the
 * clock as it was. `STATUS_WRITE` is the statement over them.
 */
function statusWriteCtes(where: RawBuilder<boolean>, next: RawBuilder<unknown>): RawBuilder<unknown> {
  return sql`
    cur AS (
      SELECT cur.id, cur.owner_id, cur.daemon_client_id, cur.status, cur.gpu_count, ${next} AS next
      FROM providers cur JOIN provider_liveness l ON l.provider_id = cur.id
      WHERE ${where}
      ORDER BY cur.id FOR UPDATE OF cur, l),
    moved AS (
      UPDATE providers p SET status = cur.next FROM cur
      WHERE p.id = cur.id AND cur.next IS DISTINCT FROM cur.status
      RETURNING p.id),
    seen AS (
      UPDATE provider_liveness l SET status = cur.next, last_seen_at = now()
      FROM cur LEFT JOIN moved ON moved.id = cur.id
      WHERE l.provider_id = cur.id
      RETURNING l.provider_id, l.last_seen_at)`;
}

const STATUS_WRITE = sql`
    SELECT cur.id, cur.owner_id, cur.daemon_client_id, cur.status AS previous_status, cur.next AS status,
      seen.last_seen_at, cur.gpu_count
    FROM cur JOIN seen ON seen.provider_id = cur.id`;

/** The write of `statusWriteCtes` for the providers `where` selects, with its status events. */
function writeStatus(
  db: Kysely<RegistryDB>,
  where: RawBuilder<boolean>,
  next: RawBuilder<unknown>,
  recording: EventRecording | undefined,
) {
  return withStatusEvents<StatusRow>(STATUS_WRITE, recording, statusWriteCtes(where, next)).execute(db);
}

/**
 * Sets the status named by an explicit update and `last_seen_at`, and the owner's hold to `held` (undefined: kept);
 * undefined when the provider does not exist (or is not in `scope`). Call it in a transaction.
 */
export async function setStatus(
  db: Kysely<RegistryDB>,
  id: string,
  status: ProviderStatus,
  held: boolean | undefined,
  recording?: EventRecording,
  scope?: WriteScope,
): Promise<StatusWrite | undefined> {
  const { rows } = await writeStatus(db, sql`cur.id = ${id}${inScope(scope, 'cur')}`, sql`${status}::text`, recording);
  const written = rows[0];
  if (written && held !== undefined) {
    await db.updateTable('providers').set({ held }).where('id', '=', id).where('held', '<>', held).execute();
  }
  return written;
}

/**
 * Whether the provider is fully rented (the rental rule's condition, `domain/gpu-holds.ts`); false for a
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
    RETURNING p.id, p.owner_id, p.daemon_client_id, cur.status AS previous_status, p.status,
      (SELECT l.last_seen_at FROM provider_liveness l WHERE l.provider_id = p.id)`,
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
  return sql`
    UPDATE gpus g SET ${keepingAbsent(GPU_METRIC_FIELDS)}
    FROM ${metricRows([{ id, owner: null, daemon: null, metrics }])}
    WHERE g.provider_id = m.provider_id AND g.idx = m.idx`.execute(db);
}

/** `SET` assignments of `fields` from the reported metrics `m`, a metric not reported keeping the GPU's (`g`) value. */
const keepingAbsent = (fields: readonly GpuField[]) =>
  sql.join(fields.map((f) => sql`${sql.ref(f.name)} = COALESCE(${sql.ref(`m.${f.name}`)}, ${sql.ref(`g.${f.name}`)})`));

/**
 * A heartbeat of a provider, limited to the machines of `owner` (null: any) and, for a daemon, to those bound to
 * `daemon` or to none (null: not limited so), with the metrics it reports.
 */
export type Beat = { id: string; owner: string | null; daemon: string | null; metrics?: GpuMetrics[] };

/**
 * The condition on the row `row` (a provider row, `cur`, or its narrow row, `l`, which carries copies of the owner and
 * the bound daemon) that one of `beats` names it and may write it (its owner and daemon limits allow): its ID among the
 * beats' (the index probe), and then in one of four uncorrelated sets, the IDs of unlimited beats, the (ID, owner)
 * pairs of beats limited to an owner, those of daemons' beats when the machine is bound to no daemon, or the (ID,
 * owner, daemon) triples of daemons' beats, which PostgreSQL hashes once per statement (a correlated search of the
 * beats for each row would cost the square of the batch). `relation` names the beats where the statement has them
 * already (`beatsCte`); without it each set unnests their arrays again.
 */
function beatsMayWrite(beats: Beat[], row: 'cur' | 'l', relation?: RawBuilder<unknown>): RawBuilder<boolean> {
  const id = sql.ref(row === 'l' ? 'l.provider_id' : 'cur.id');
  const owner = sql.ref(`${row}.owner_id`);
  const bound = sql.ref(`${row}.daemon_client_id`);
  const beat = relation ?? beatsRelation(beats);
  // The IDs the index is probed with: the statement's beats when it has them, else an array of their own.
  const ids = relation ? sql`ARRAY(SELECT b.id FROM ${relation})` : sql`${uuidArray(beats.map((b) => b.id))}::uuid[]`;
  return sql<boolean>`${id} = ANY(${ids}) AND (
        ${id} IN (SELECT b.id FROM ${beat} WHERE b.owner IS NULL)
        OR (${id}, ${owner}) IN (SELECT b.id, b.owner FROM ${beat} WHERE b.owner IS NOT NULL AND b.daemon IS NULL)
        OR (${bound} IS NULL
            AND (${id}, ${owner}) IN (SELECT b.id, b.owner FROM ${beat} WHERE b.daemon IS NOT NULL))
        OR (${id}, ${owner}, ${bound}) IN (SELECT b.id, b.owner, b.daemon FROM ${beat} WHERE b.daemon IS NOT NULL))`;
}

/** The beats as a relation `b(id, owner, daemon)`. */
const beatsRelation = (beats: Beat[]) =>
  sql`unnest(${uuidArray(beats.map((b) => b.id))}::uuid[], ${textArray(beats.map((b) => b.owner))}::text[],
    ${textArray(beats.map((b) => b.daemon))}::text[]) AS b(id, owner, daemon)`;

/**
 * The common table expression `b` of the beats, for a statement that names them several times (`beatsMayWrite` with
 * `BEATS`): their arrays are sent, and parsed, once rather than once a mention.
 */
const beatsCte = (beats: Beat[]) => sql`b AS MATERIALIZED (SELECT * FROM ${beatsRelation(beats)})`;
const BEATS = sql`b`;

/**
 * Whether the beat that reported the metrics row `m` may write the provider row `row` (its owner and daemon limits):
 * `beatsMayWrite` for one beat, where a provider written for another beat must not take this one's metrics.
 */
const metricsMayWrite = (row: string) => {
  const bound = sql.ref(`${row}.daemon_client_id`);
  return sql<boolean>`(m.owner IS NULL OR (m.owner = ${sql.ref(`${row}.owner_id`)}
      AND (m.daemon IS NULL OR ${bound} IS NULL OR m.daemon = ${bound})))`;
};

/** Whether a beat may write the machine (`beatsMayWrite` for one beat and one machine, in the service). */
const beatMayWrite = (b: Beat, machine: { owner_id: string; daemon_client_id: string | null }) =>
  b.owner === null ||
  (b.owner === machine.owner_id &&
    (b.daemon === null || machine.daemon_client_id === null || b.daemon === machine.daemon_client_id));

/**
 * The metrics of `beats` as a relation `m(provider_id, owner, daemon, idx, <metric fields>)`: one row per GPU
 * reported, with the owner and daemon limits of the beat that reported it.
 */
function metricRows(beats: Beat[]): RawBuilder<unknown> {
  const reported = beats.flatMap((b) =>
    (b.metrics ?? []).map((m) => ({ id: b.id, owner: b.owner, daemon: b.daemon, m })),
  );
  const columns = GPU_METRIC_FIELDS.map(
    (f) => sql`${arrayLiteral(reported.map(({ m }) => m[f.name] ?? null))}::${COLUMN_TYPE[f.type]}[]`,
  );
  const names = sql.join(GPU_METRIC_FIELDS.map((f) => sql.ref(f.name)));
  return sql`unnest(${uuidArray(reported.map((r) => r.id))}::uuid[], ${textArray(reported.map((r) => r.owner))}::text[],
      ${textArray(reported.map((r) => r.daemon))}::text[], ${arrayLiteral(reported.map((r) => r.m.index))}::int[],
      ${sql.join(columns)})
      AS m(provider_id, owner, daemon, idx, ${names})`;
}

/** The metrics the heartbeat rule writes without the provider's lock: all but health (see `moveClocks`). */
const LIVE_METRICS = GPU_METRIC_FIELDS.filter((f) => f.name !== 'is_healthy');

/**
 * The heartbeats of `beats` (each limited to an owner; null: any) whose provider's status the heartbeat rule keeps,
 * and whose metrics neither name a GPU the provider lacks nor change a GPU's health: their narrow rows' clocks moved
 * to now, locked in ID order, and their GPUs' reported metrics written where they differ from the stored ones (a GPU
 * whose values are all the same is not written at), in the same statement; nothing else is written (not even a lock on
 * `providers`). The rows are locked in key order first (`ORDER BY ... FOR UPDATE`), whatever the beats' order and
 * whatever plan PostgreSQL picks: the update alone took them in its scan's order, which a sequential scan (a small
 * table) makes the order of the rows' versions on their pages, and two batches that shared machines deadlocked
 * (`heartbeat-batches.test.ts`). The lock pass costs about an eighth of PostgreSQL's CPU per heartbeat (a direct
 * replay at a million machines, batches of 500). A narrow row found locked is re-checked once its writer commits.
 * The beats this leaves (a status that a heartbeat revives, an unknown index, a change of health: what needs the
 * provider's lock and may change its status) go to `recordHeartbeat` or `reviveBeats`. No status changes here, so no
 * event either. Health is the one metric left out of the write: a beat reporting the stored health has nothing to
 * write there, and leaving it out means an older report can never undo a health change committed under the
 * provider's lock meanwhile.
 */
async function moveClocks(db: Kysely<RegistryDB>, beats: Beat[]) {
  const withMetrics = beats.filter((b) => b.metrics && b.metrics.length > 0);
  if (withMetrics.length === 0) {
    const { rows } = await sql<MovedClock>`${PREPARED_SQL}
    WITH ${beatsCte(beats)},
    cur AS (
      SELECT l.provider_id, l.ctid AS at FROM provider_liveness l
      WHERE ${beatsMayWrite(beats, 'l', BEATS)} AND ${keptByHeartbeatSql}
      ORDER BY l.provider_id FOR UPDATE OF l),
    ${movedClocks}
    ${MOVED_ROWS}`.execute(db);
    return statusWrites(rows);
  }
  return writeClocksAndMetrics(db, beats, withMetrics);
}

/**
 * `moveClocks`'s statement for beats some of which carry metrics (at most one such beat per provider). It takes the
 * narrow rows, then the GPU rows: the order of every writer of both (the locked heartbeat; a full update and a
 * deletion take the narrow row before the GPUs too, after the provider row, which this one never takes).
 */
async function writeClocksAndMetrics(db: Kysely<RegistryDB>, beats: Beat[], withMetrics: Beat[]) {
  const stored = sql.join(LIVE_METRICS.map((f) => sql.ref(`g.${f.name}`)));
  const after = sql.join(LIVE_METRICS.map((f) => sql`COALESCE(${sql.ref(`m.${f.name}`)}, ${sql.ref(`g.${f.name}`)})`));
  const { rows } = await sql<MovedClock>`${PREPARED_SQL}
    WITH m AS MATERIALIZED (SELECT * FROM ${metricRows(withMetrics)}), ${beatsCte(beats)},
    cur AS (
      SELECT l.provider_id, l.ctid AS at
      FROM provider_liveness l
      WHERE ${beatsMayWrite(beats, 'l', BEATS)} AND ${keptByHeartbeatSql}
        AND l.provider_id NOT IN (
          SELECT m.provider_id FROM m JOIN provider_liveness ml ON ml.provider_id = m.provider_id
          LEFT JOIN gpus g ON g.provider_id = m.provider_id AND g.idx = m.idx
          WHERE ${metricsMayWrite('ml')} AND (g.idx IS NULL OR m.is_healthy <> g.is_healthy))
      ORDER BY l.provider_id FOR UPDATE OF l),
    ${movedClocks},
    metrics AS (
      UPDATE gpus g SET ${keepingAbsent(LIVE_METRICS)}
      FROM m JOIN moved ON moved.id = m.provider_id
      WHERE g.provider_id = m.provider_id AND g.idx = m.idx AND ${metricsMayWrite('moved')}
        AND (${stored}) IS DISTINCT FROM (${after})
      RETURNING g.provider_id)
    ${MOVED_ROWS}`.execute(db);
  return statusWrites(rows);
}

/**
 * `moved`, the clocks of the narrow rows `cur` locked (`at`: the locked version's place) moved to now: each row written
 * where the lock found it (a TID scan: the update probes no index again, which had cost PostgreSQL a fifth of a
 * heartbeat at a million machines). A row another transaction changed after the statement's snapshot was locked at its
 * newest version, which the snapshot cannot see there: it is not moved (nor, joined to `moved`, are its metrics
 * written), and its beat goes the way of those the statement leaves (`recordHeartbeats`), which writes it whole.
 */
const movedClocks = sql`moved AS (
      UPDATE provider_liveness l SET last_seen_at = now()
      FROM cur WHERE l.ctid = cur.at
      RETURNING l.provider_id AS id, l.owner_id, l.daemon_client_id, l.status)`;

/**
 * The rows of `moved` as the statement answers them: the clock is the statement's `now()` for every row, and no status
 * changed, so the clock comes once (on the first row) and the status once a row; `statusWrites` makes them whole.
 * (Each row's clock and previous status, formatted by PostgreSQL and parsed by the driver a row at a time, were a
 * quarter of the bytes a batch's answer carried.)
 */
const MOVED_ROWS = sql`SELECT id, owner_id, daemon_client_id, NULL AS previous_status, status,
      CASE WHEN row_number() OVER () = 1 THEN now() END AS last_seen_at FROM moved`;

/**
 * A row of `MOVED_ROWS`: no status before (null, in its place among the columns, so that the row has the shape of every
 * other status write once `statusWrites` sets it) and the clock on the first row only.
 */
type MovedClock = Omit<StatusWrite, 'previous_status' | 'last_seen_at'> & {
  previous_status: StatusWrite['previous_status'] | null;
  last_seen_at: Date | null;
};

/** `MOVED_ROWS` made whole, in place: each row's status before is its status now, its clock the first row's. */
function statusWrites(rows: MovedClock[]): StatusWrite[] {
  const clock = rows[0]?.last_seen_at ?? new Date(0);
  for (const r of rows) {
    r.previous_status = r.status;
    r.last_seen_at = clock;
  }
  return rows as StatusWrite[];
}

/**
 * The heartbeat rule for the providers of `beats` (with their owner limits), provider rows first: the status after
 * (`statusAfterHeartbeatSql`), stored where it changes with its event, and the clock.
 */
function reviveBeats(db: Kysely<RegistryDB>, beats: Beat[], recording: EventRecording | undefined) {
  return writeStatus(db, beatsMayWrite(beats, 'cur'), statusAfterHeartbeatSql, recording);
}

/**
 * Records a heartbeat under the provider's lock: the heartbeat rule (`statusAfterHeartbeatSql`), `last_seen_at` =
 * now, and the supplied metrics on the GPUs at the given indexes, in one transaction. An index the provider does not
 * have throws `UnknownGpuIndex` and nothing is written. A GPU's health decides whether it can be rented, so metrics
 * that report health apply the rental rule after them (`applyRentalRule`). Rows are taken in the order every writer
 * of them keeps: the provider row, its narrow row, its GPUs. Beats go through `recordHeartbeats` first, which writes
 * the common ones without the provider's lock and leaves these.
 */
async function recordHeartbeat(
  db: Kysely<RegistryDB>,
  id: string,
  metrics: GpuMetrics[],
  recording: EventRecording | undefined,
  limits: Pick<Beat, 'owner' | 'daemon'>,
): Promise<StatusWrite | undefined> {
  const beat = [{ id, ...limits }];
  return db.transaction().execute(async (tx) => {
    const { rows } = await reviveBeats(tx, beat, recording);
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

/** Runs a step of a batch write; the service passes its retry of transient errors, so a step is retried alone. */
type Step = <T>(fn: () => Promise<T>) => Promise<T>;

/** Providers whose beats the locked path takes at once (each provider's beats in batch order). */
const LOCKED_CONCURRENCY = 8;

/**
 * Records heartbeats for several providers, with their metrics (the service groups concurrent heartbeats:
 * `RegistryService.heartbeat`): one statement moves the clocks, and writes the changed metrics, of those whose
 * status the rule keeps and whose metrics change no GPU's health (`moveClocks`: the beat of nearly every daemon,
 * every interval; one beat with metrics per provider). Only when some are left, metric-less ones go to a second
 * statement that applies the rule under their provider rows' locks (`reviveBeats`), and those with metrics the locked
 * way (`recordLocked`). Each statement locks its rows in ID order, so concurrent batches and instances never
 * deadlock; each is a `step` (the service retries one that failed on a transient error, alone: those before it have
 * committed). One result per beat, in order: the provider's status before and after (as by `recordHeartbeat`; the
 * beats of one provider written together share one), its `UnknownGpuIndex`, or undefined when it names no provider
 * it may write. Each beat names the owner it is limited to (null: any); a provider written together is written when
 * at least one of its beats may write it.
 */
export async function recordHeartbeats(
  db: Kysely<RegistryDB>,
  beats: Beat[],
  recording?: EventRecording,
  step: Step = (fn) => fn(),
): Promise<(StatusWrite | Error | undefined)[]> {
  // One beat with metrics per provider goes the grouped way (two would meet in one UPDATE of the same GPU rows, where
  // only one row of values lands); a provider's later ones go the locked way, after it.
  const withMetrics = new Set<string>();
  const later = new Set<Beat>();
  for (const b of beats) {
    if (!b.metrics?.length) continue;
    if (withMetrics.has(b.id)) later.add(b);
    else withMetrics.add(b.id);
  }
  const grouped = later.size === 0 ? beats : beats.filter((b) => !later.has(b));
  const moved = new Map<string, StatusWrite>();
  for (const r of await step(() => moveClocks(db, grouped))) moved.set(r.id, r);
  const bare = beats.filter((b) => !moved.has(b.id) && !b.metrics?.length);
  const revived = new Map<string, StatusWrite>();
  if (bare.length > 0) {
    const { rows } = await step(() => reviveBeats(db, bare, recording));
    for (const r of rows) revived.set(r.id, r);
  }
  const results: (StatusWrite | Error | undefined)[] = beats.map((b) =>
    b.metrics?.length ? (later.has(b) ? undefined : moved.get(b.id)) : (moved.get(b.id) ?? revived.get(b.id)),
  );
  const locked: (readonly [Beat, number])[] = [];
  beats.forEach((b, i) => {
    if (b.metrics?.length && !results[i]) locked.push([b, i]);
  });
  if (locked.length > 0) await recordLocked(db, locked, results, recording, step);
  return results;
}

/**
 * The beats with metrics the grouped statement left (a revival, a change of health, a GPU the machine lacks, a second
 * beat of one provider), into `results` at their places: a beat naming a GPU its machine lacks is answered from one
 * read of the machines, without a transaction; the others one transaction each (`recordHeartbeat`), up to
 * `LOCKED_CONCURRENCY` providers at once, each provider's beats in batch order (so that of several reviving one
 * provider, the first observes the change).
 */
async function recordLocked(
  db: Kysely<RegistryDB>,
  locked: (readonly [Beat, number])[],
  results: (StatusWrite | Error | undefined)[],
  recording: EventRecording | undefined,
  step: Step,
) {
  const ids = [...new Set(locked.map(([b]) => b.id))];
  const machines = new Map(
    (
      await step(() =>
        db
          .selectFrom('providers')
          .select(['id', 'owner_id', 'daemon_client_id', 'gpu_count'])
          .where('id', 'in', ids)
          .execute(),
      )
    ).map((p) => [p.id, p]),
  );
  const byProvider = new Map<string, (readonly [Beat, number])[]>();
  for (const [b, i] of locked) {
    const machine = machines.get(b.id);
    const mayWrite = machine && beatMayWrite(b, machine);
    const outOfRange = mayWrite && b.metrics!.find((m) => m.index >= machine.gpu_count);
    if (outOfRange) results[i] = registryErrors.unknownGpuIndex(outOfRange.index, machine.gpu_count);
    else if (mayWrite) byProvider.set(b.id, [...(byProvider.get(b.id) ?? []), [b, i]]);
  }
  await forEachLimited([...byProvider.values()], LOCKED_CONCURRENCY, async (providerBeats) => {
    for (const [b, i] of providerBeats) {
      try {
        results[i] = await step(() => recordHeartbeat(db, b.id, b.metrics!, recording, b));
      } catch (err) {
        if (!(err instanceof UnknownGpuIndex)) throw err;
        results[i] = err;
      }
    }
  });
}

/** Pages `[from, to)` of the narrow table (`to` undefined: to its end). */
export interface PageRange {
  from: number;
  to?: number;
}

/** The narrow table's size in pages (its heap, as it is now). */
export async function livenessPages(db: Kysely<RegistryDB>): Promise<number> {
  const { rows } = await sql<{ pages: string }>`
    SELECT pg_relation_size('provider_liveness') / current_setting('block_size')::int AS pages`.execute(db);
  return Number(rows[0]?.pages ?? 0);
}

/**
 * Stores `offline` for up to `batch` providers stored in a state of `AUTO_OFFLINE_FROM` and silent past the bound,
 * oldest first (`isSilent`: a read of the narrow rows, whose clock is in no index, at most `batch` candidates, then
 * their provider rows looked up by key: the keys as one array, which PostgreSQL reads through the primary key
 * whatever it estimates of the candidates, where a join on the candidates planned for `batch` of them hashed the
 * whole providers table, twice, on a fleet of tens of thousands), and returns them. `pages` limits the read to a range of the narrow table's
 * pages (a TID range scan), so that a periodic sweep can read the table a slice at a time. The narrow row and the
 * provider row are locked with SKIP LOCKED (the sweep never waits, so its lock order cannot deadlock) and re-checked
 * after locking, so with several instances sweeping at once each provider is returned (and its event recorded) by
 * exactly one of them, and a heartbeat that lands first wins.
 */
export async function sweepOffline(
  db: Kysely<RegistryDB>,
  offlineAfterMs: number,
  batch = 500,
  recording?: EventRecording,
  pages?: PageRange,
) {
  const where = [isSilent(offlineAfterMs)];
  if (pages) {
    where.push(sql<boolean>`l.ctid >= ${`(${pages.from},0)`}::tid`);
    if (pages.to !== undefined) where.push(sql<boolean>`l.ctid < ${`(${pages.to},0)`}::tid`);
  }
  const { rows } = await withStatusEvents<StatusWrite>(
    sql`
    WITH candidates AS MATERIALIZED (
      SELECT l.provider_id, l.status, l.last_seen_at FROM provider_liveness l
      WHERE ${sql.join(where, sql` AND `)}
      ORDER BY l.last_seen_at
      LIMIT ${batch}
      FOR UPDATE OF l SKIP LOCKED
    ),
    stale AS (
      SELECT c.provider_id AS id, c.status, c.last_seen_at
      FROM candidates c JOIN providers p ON p.id = c.provider_id
      WHERE p.id = ANY ((SELECT array_agg(provider_id) FROM candidates)::uuid[])
      ORDER BY c.last_seen_at
      FOR UPDATE OF p SKIP LOCKED
    )
    UPDATE providers p SET status = 'offline'
    FROM stale WHERE p.id = stale.id AND p.id = ANY ((SELECT array_agg(id) FROM stale)::uuid[])
    RETURNING p.id, p.owner_id, p.daemon_client_id, stale.status AS previous_status, p.status, stale.last_seen_at`,
    recording,
  ).execute(db);
  return rows;
}
