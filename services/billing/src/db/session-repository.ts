/** Queries on rental sessions. Every function takes the database or a transaction. */
import { PREPARED_SQL } from '@gpu/common';
import { type Insertable, type Kysely, type Selectable, sql, type Transaction, type Updateable } from 'kysely';
import type { KeysetPosition } from '../domain/keyset.ts';
import { cursorAt, olderThan, type Party, partyOf } from './keyset-sql.ts';
import type { BillingDB, RentalSessionTable, SessionStatus } from './schema.ts';
import { type UsageRow, usageRecordsInsert } from './usage-repository.ts';

type Db = Kysely<BillingDB> | Transaction<BillingDB>;

export type SessionRow = Selectable<RentalSessionTable>;

/** A session's row, optionally locked until the transaction ends. */
export async function findSession(db: Db, id: string, lock = false): Promise<SessionRow | undefined> {
  let q = db.selectFrom('rental_sessions').selectAll().where('id', '=', id);
  if (lock) q = q.forUpdate();
  return q.executeTakeFirst();
}

/** Sessions' rows by ID (in no order; an unknown ID is left out). */
export async function findSessions(db: Db, ids: string[]): Promise<SessionRow[]> {
  if (ids.length === 0) return [];
  return db.selectFrom('rental_sessions').selectAll().where('id', '=', sql<string>`ANY(${ids}::uuid[])`).execute();
}

/** Names the session whose start took this one's GPUs (before its end is written: domain/sessions/bids.ts). */
export async function markPreemptedBy(trx: Db, id: string, winnerId: string): Promise<void> {
  await trx.updateTable('rental_sessions').set({ preempted_by: winnerId }).where('id', '=', id).execute();
}

/** Writes a new session; its row as stored. */
export async function insertSession(trx: Db, values: Insertable<RentalSessionTable>): Promise<SessionRow> {
  return trx.insertInto('rental_sessions').values(values).returningAll().executeTakeFirstOrThrow();
}

/** What ending a session writes on its row. */
export type SessionEndChange = Pick<
  Updateable<RentalSessionTable>,
  'status' | 'ended_at' | 'end_reason' | 'billed_minutes' | 'total_cost' | 'grace_until' | 'updated_at'
>;

/** Writes a session's end; its row as stored. */
export async function updateEndedSession(trx: Db, id: string, change: SessionEndChange): Promise<SessionRow> {
  return trx.updateTable('rental_sessions').set(change).where('id', '=', id).returningAll().executeTakeFirstOrThrow();
}

/** Up to `limit` IDs of sessions in `statuses` after `after`, in ID order (the biller's pages). */
export async function sessionIdsIn(
  db: Db,
  statuses: readonly SessionStatus[],
  after: string,
  limit: number,
): Promise<{ id: string }[]> {
  return db
    .selectFrom('rental_sessions')
    .select('id')
    .where('status', 'in', statuses)
    .where('id', '>', after)
    .orderBy('id')
    .limit(limit)
    .execute();
}

/**
 * Up to `limit` running sessions whose cap's time is over by `now`, in order of that time (the cap sweep's pages:
 * `after` the previous page's last).
 */
export async function sessionIdsPastCap(
  db: Db,
  now: Date,
  after: { capEndsAt: Date; id: string } | undefined,
  limit: number,
): Promise<{ id: string; cap_ends_at: Date }[]> {
  let q = db
    .selectFrom('rental_sessions')
    .select(['id', 'cap_ends_at'])
    .where('cap_ends_at', 'is not', null)
    .where('status', 'in', ['active', 'grace_period'])
    .where('cap_ends_at', '<=', now);
  if (after)
    q = q.where(sql<boolean>`(cap_ends_at, id) > (${after.capEndsAt.toISOString()}::timestamptz, ${after.id}::uuid)`);
  const rows = await q.orderBy('cap_ends_at').orderBy('id').limit(limit).execute();
  return rows as { id: string; cap_ends_at: Date }[];
}

/** The session's row locked, if it is in `statuses` and no one else holds its lock (SKIP LOCKED). */
export async function claimSessionIn(
  trx: Transaction<BillingDB>,
  id: string,
  statuses: readonly SessionStatus[],
): Promise<SessionRow | undefined> {
  return trx
    .selectFrom('rental_sessions')
    .selectAll()
    .where('id', '=', id)
    .where('status', 'in', statuses)
    .forUpdate()
    .skipLocked()
    .executeTakeFirst();
}

/** What billing writes on one session: minutes, cost, status, grace, and the newest usage report if any. */
export interface BilledSession {
  id: string;
  minutes: number;
  /** The session's total cost (a decimal at the scale). */
  cost: { toFixed(decimals?: number): string };
  status: SessionStatus;
  graceUntil: Date | null;
  lowBalanceAt: Date | null;
  usage?: { actualPowerW: string; lastUsageAt: Date };
  /** Where the caller's row lock found the session's row (its `ctid`), when it read it so: written there directly. */
  at?: string;
}

/**
 * The columns billing writes (`last_usage_at` only with a report); the rest of a locked session row cannot change
 * under its lock.
 */
export type BilledColumns = Pick<
  SessionRow,
  'id' | 'billed_minutes' | 'total_cost' | 'status' | 'grace_until' | 'low_balance_at' | 'updated_at' | 'actual_power_w'
> &
  Partial<Pick<SessionRow, 'last_usage_at'>>;

/**
 * Writes every session's billing (and usage report) in one statement; the written columns by session ID. The usage
 * records of a batch (`usageRecords`) are written in the same statement, as a WITH query.
 *
 * A session whose change says where its row lock found the row (`at`, its `ctid`) is written there, a TID scan, with
 * no descent of the primary key's index (one per session, a tenth of a usage update's PostgreSQL time). The row lock
 * keeps every other writer off the row, so only this transaction could have moved it since; a row no longer at its
 * place (the transaction wrote it in between) is not found there and is written by its ID in a second statement.
 *
 * The written columns are the change's own (`total_cost` at the money `scale`, as the column reads), not read back:
 * only `actual_power_w`, which a change without a report leaves as it was, comes back (reading the four timestamps
 * back cost PostgreSQL their output and the driver their parse, a few microseconds an update).
 */
export async function writeBilledSessions(
  trx: Transaction<BillingDB>,
  changes: BilledSession[],
  now: Date,
  scale: number,
  usageRecords: UsageRow[] = [],
): Promise<Map<string, BilledColumns>> {
  const located = changes.length > 0 && changes.every((c) => c.at !== undefined);
  const power = await updateBilled(trx, changes, now, usageRecords, located);
  if (located && power.size < changes.length) {
    const moved = changes.filter((c) => !power.has(c.id));
    for (const [id, w] of await updateBilled(trx, moved, now, [], false)) power.set(id, w);
  }
  const written = new Map<string, BilledColumns>();
  for (const c of changes) {
    const actualPowerW = power.get(c.id);
    if (actualPowerW === undefined) continue;
    written.set(c.id, {
      id: c.id,
      billed_minutes: c.minutes,
      total_cost: c.cost.toFixed(scale),
      status: c.status,
      grace_until: c.graceUntil,
      low_balance_at: c.lowBalanceAt,
      updated_at: now,
      actual_power_w: actualPowerW,
      ...(c.usage ? { last_usage_at: c.usage.lastUsageAt } : {}),
    });
  }
  return written;
}

/**
 * One statement of `writeBilledSessions`: the sessions found by `ctid` (`located`) or by ID; each written one's
 * `actual_power_w` by ID.
 */
async function updateBilled(
  trx: Transaction<BillingDB>,
  changes: BilledSession[],
  now: Date,
  usageRecords: UsageRow[],
  located: boolean,
): Promise<Map<string, string | null>> {
  const col = <T>(f: (c: BilledSession) => T) => changes.map(f);
  // Prepared where each row is found by its place (the usage batch's path, a TID scan per row); by ID (the biller's
  // path, a row moved since its lock) planned each time: a plan cached while the sessions table was small could scan
  // it whole until an ANALYZE replanned it, as openUsageBatch's did with the usage records.
  const { rows } = await sql<Pick<SessionRow, 'id' | 'actual_power_w'>>`${located ? PREPARED_SQL : sql``}
    ${usageRecords.length > 0 ? sql`WITH also AS (${usageRecordsInsert(usageRecords)})` : sql``}
    UPDATE rental_sessions AS s SET
      billed_minutes = v.billed_minutes,
      total_cost = v.total_cost,
      status = v.status,
      grace_until = v.grace_until,
      low_balance_at = v.low_balance_at,
      updated_at = ${now.toISOString()}::timestamptz,
      actual_power_w = CASE WHEN v.has_usage THEN v.actual_power_w ELSE s.actual_power_w END,
      last_usage_at = CASE WHEN v.has_usage THEN v.last_usage_at ELSE s.last_usage_at END
    FROM unnest(
      ${col((c) => c.id)}::uuid[], ${col((c) => c.minutes)}::integer[], ${col((c) => c.cost.toFixed())}::numeric[],
      ${col((c) => c.status)}::text[], ${col((c) => c.graceUntil?.toISOString() ?? null)}::timestamptz[],
      ${col((c) => c.lowBalanceAt?.toISOString() ?? null)}::timestamptz[],
      ${col((c) => c.usage !== undefined)}::boolean[], ${col((c) => c.usage?.actualPowerW ?? null)}::numeric[],
      ${col((c) => c.usage?.lastUsageAt.toISOString() ?? null)}::timestamptz[],
      ${located ? col((c) => c.at ?? null) : null}::tid[]
    ) AS v(id, billed_minutes, total_cost, status, grace_until, low_balance_at, has_usage, actual_power_w, last_usage_at,
      at)
    WHERE ${located ? sql`s.ctid = v.at AND s.id = v.id` : sql`s.id = v.id`}
    RETURNING s.id, s.actual_power_w`.execute(trx);
  return new Map(rows.map((r) => [r.id, r.actual_power_w]));
}

/** Which sessions a list shows: by provider, renter, status, and the user who is a party (renter or provider owner). */
export interface SessionFilter {
  providerId?: string;
  userId?: string;
  status?: SessionStatus[];
  /** Only sessions this user took part in: as the renter or the machine's owner (`provider`: as the owner only). */
  party?: Party;
}

/** Up to `limit` sessions after `after`, newest start first, each with its cursor time. */
export async function listSessions(
  db: Db,
  f: SessionFilter,
  after: KeysetPosition | undefined,
  limit: number,
): Promise<(SessionRow & { cursor_at: string })[]> {
  let q = db.selectFrom('rental_sessions').selectAll().select(cursorAt('started_at').as('cursor_at'));
  if (f.party) q = q.where(partyOf(f.party));
  if (f.providerId) q = q.where('provider_id', '=', f.providerId);
  if (f.userId) q = q.where('user_id', '=', f.userId);
  if (f.status?.length) q = q.where('status', 'in', f.status);
  if (after) q = q.where(olderThan('started_at', after));
  return q.orderBy('started_at', 'desc').orderBy('id', 'desc').limit(limit).execute();
}

/** Writes a session's new bid and rates (rates by minute, the cap's deadline); the row as stored. */
export async function changeSessionRate(trx: Transaction<BillingDB>, s: SessionRow, now: Date): Promise<SessionRow> {
  return trx
    .updateTable('rental_sessions')
    .set({
      bid: s.bid,
      base_rate_per_gpu: s.base_rate_per_gpu,
      base_hourly_rate: s.base_hourly_rate,
      total_hourly_rate: s.total_hourly_rate,
      rate_segments: s.rate_segments === null ? null : JSON.stringify(s.rate_segments),
      cap_ends_at: s.cap_ends_at,
      updated_at: now,
    })
    .where('id', '=', s.id)
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** Starts a workload session's billing clock at `billedFrom` (and a capped one's deadline): its workload runs. */
export async function startSessionClock(
  trx: Transaction<BillingDB>,
  sessionId: string,
  billedFrom: Date,
  capEndsAt: Date | null,
): Promise<void> {
  await trx
    .updateTable('rental_sessions')
    .set({ billed_from: billedFrom, cap_ends_at: capEndsAt })
    .where('id', '=', sessionId)
    .execute();
}

/**
 * Binds the provider's sessions in `statuses` to the daemon client `clientId` (null: none), where they are bound to
 * another; how many moved.
 */
export async function bindSessionsToClient(
  db: Db,
  providerId: string,
  statuses: readonly SessionStatus[],
  clientId: string | null,
): Promise<number> {
  const result = await db
    .updateTable('rental_sessions')
    .set({ provider_client_id: clientId })
    .where('provider_id', '=', providerId)
    .where('status', 'in', statuses)
    .where((eb) =>
      clientId === null
        ? eb('provider_client_id', 'is not', null)
        : eb.or([eb('provider_client_id', 'is', null), eb('provider_client_id', '<>', clientId)]),
    )
    .executeTakeFirst();
  return Number(result.numUpdatedRows);
}

/**
 * Deletes the usage records of up to `limit` sessions that ended before `before` and marks them purged, in one
 * statement (sessions taken oldest first with SKIP LOCKED: instances purging at once share the work); how many
 * sessions and records went. The session row, its billing record and the ledger keep what was billed.
 */
export async function purgeUsageRecords(
  db: Kysely<BillingDB>,
  before: Date,
  limit: number,
): Promise<{ sessions: number; records: number }> {
  const { rows } = await sql<{ sessions: number; records: number }>`
    WITH s AS (
      SELECT id FROM rental_sessions
      WHERE ended_at IS NOT NULL AND NOT usage_purged AND ended_at < ${before}
      ORDER BY ended_at LIMIT ${limit}
      FOR UPDATE SKIP LOCKED),
    gone AS (DELETE FROM usage_records u USING s WHERE u.session_id = s.id RETURNING 1),
    marked AS (UPDATE rental_sessions r SET usage_purged = true FROM s WHERE r.id = s.id RETURNING 1)
    SELECT (SELECT count(*) FROM marked)::int AS sessions, (SELECT count(*) FROM gone)::int AS records`.execute(db);
  return rows[0] ?? { sessions: 0, records: 0 };
}
