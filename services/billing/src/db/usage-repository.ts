/**
 * Queries on usage records (one per applied report) for usage batches. Statements are set-based, whatever the
 * batch's size: a batch opens with one statement (`openUsageBatch`) and writes with one (`writeBilledSessions` with
 * `usageRecordsInsert`), so it costs four round trips with its BEGIN and COMMIT.
 */
import { type RawBuilder, type Selectable, sql, type Transaction } from 'kysely';
import type { BillingDB, RentalSessionTable, UsageRecordTable } from './schema.ts';

export type UsageRow = Selectable<UsageRecordTable>;

/**
 * The columns of a session that billing reads (domain/sessions/billing.ts) and the usage batch's checks (its parties,
 * status and start): a usage batch reads only these, a third of the row. Reading the whole row cost the service a
 * fifth of its time per update (the driver parses every column: eight timestamps, a dozen exact numbers); a batch that
 * must answer or record the whole session reads it once written (`findSessions`).
 */
const BILLABLE_COLUMNS = [
  'id',
  'user_id',
  'wallet_id',
  'hold_id',
  'provider_owner_id',
  'provider_client_id',
  'status',
  'started_at',
  'last_usage_at',
  'workload',
  'billed_from',
  'billed_minutes',
  'total_cost',
  'total_hourly_rate',
  'rate_segments',
  'bid',
  'spend_cap',
  'cap_ends_at',
  'low_balance_at',
  'grace_until',
  'gpu_count',
] as const satisfies readonly (keyof RentalSessionTable)[];
const billableColumns = sql.join(BILLABLE_COLUMNS.map((c) => sql.ref(`s.${c}`)));

/** A session's columns that billing reads (`BILLABLE_COLUMNS`). */
export type Billable = Pick<Selectable<RentalSessionTable>, (typeof BILLABLE_COLUMNS)[number]>;

/**
 * A session of a usage batch, locked: billing's columns, what its hold still holds, the batch's reports it already
 * recorded, and where its row lies (`at`, its `ctid`: the batch writes it there, `writeBilledSessions`).
 */
export type OpenedSession = Billable & { held: string; applied: UsageRow[]; at: string };

/**
 * Opens a usage batch in one statement: locks the sessions' rows in ID order (concurrent batches take them in the
 * same order: no deadlock), each with what its hold still holds (`held`: amount - posted - released, exact in NUMERIC,
 * '0' for a session without a hold row) and the usage records already written for the batch's (session, message ID)
 * pairs (`applied`; a pair asked twice may come back twice).
 *
 * The records are looked up once for the whole batch, by a join from the keys: one probe of the (session_id,
 * message_id) index per key (the `IN (SELECT ... unnest)` form was planned as a hash semi-join over a sequential scan
 * of the whole table; a lookup per session, as a LATERAL subquery, read all the batch's keys for each session:
 * quadratic in the batch, a fifth of PostgreSQL's CPU per update at 150 updates a batch). They are
 * read with the statement's snapshot: a record committed by another batch after it (while this statement waited for
 * its session's lock, or in the moment between the snapshot and the lock) is not among them. Such a record is a
 * retry's original that raced it in another batch; the caller catches it: a retry it goes on to insert fails on the
 * (session_id, message_id) key and the batch runs again (`applyUsageBatch`), and a retry it refuses because the
 * session has ended is looked up again (`appliedUsageRecords`, after the lock).
 *
 * Not a prepared statement (planned once per connection, as `writeBilledSessions`' write by place is): its best plan
 * depends on how many usage records there are, which grows from none. A connection's cached plan, made while the table was nearly
 * empty, read the whole table for every batch (a hash join over a sequential scan) until an ANALYZE replanned it:
 * on a fresh database under load, 2.5 ms a batch of 19 where the key probes take a tenth of that. Planned each time,
 * it probes the key index as soon as the table has more than a few pages.
 */
export async function openUsageBatch(
  trx: Transaction<BillingDB>,
  sessionIds: string[],
  keys: { sessionId: string; messageId: string }[],
): Promise<OpenedSession[]> {
  const { rows } = await sql<Billable & { held: string; applied: RecordJson[] | null; at: string }>`
    WITH applied AS (
      SELECT u.session_id, json_agg(json_build_object(
        'id', u.id, 'message_id', u.message_id, 'reported_at', u.reported_at,
        'gpu_utilization', u.gpu_utilization::text, 'power_draw_w', u.power_draw_w::text, 'metrics', u.metrics,
        'billed_minutes', u.billed_minutes, 'cost', u.cost::text, 'created_at', u.created_at)) AS applied
      FROM unnest(${keys.map((k) => k.sessionId)}::uuid[], ${keys.map((k) => k.messageId)}::text[])
        AS k (session_id, message_id)
      JOIN usage_records u ON u.session_id = k.session_id AND u.message_id = k.message_id
      GROUP BY u.session_id
    )
    SELECT ${billableColumns}, s.ctid::text AS at, coalesce(h.amount - h.posted - h.released, 0)::text AS held, a.applied
    FROM rental_sessions s
    LEFT JOIN holds h ON h.id = s.hold_id
    LEFT JOIN applied a ON a.session_id = s.id
    WHERE s.id = ANY(${sessionIds}::uuid[])
    ORDER BY s.id
    FOR UPDATE OF s`.execute(trx);
  // Each row is kept as the driver made it, its `applied` replaced in place: copying a row into a new object (a rest
  // pattern) costs V8 a microsecond or two a row.
  const opened = rows as unknown as OpenedSession[];
  for (const row of rows) {
    (row as unknown as OpenedSession).applied = (row.applied ?? []).map((r) => ({
      ...r,
      session_id: row.id,
      reported_at: new Date(r.reported_at),
      created_at: new Date(r.created_at),
    }));
  }
  return opened;
}

/**
 * The usage records already written for these (session, message ID) pairs, read by a statement of their own (so,
 * under the sessions' locks, every committed record). A join from the keys: one probe of the (session_id,
 * message_id) index per key.
 */
export async function appliedUsageRecords(
  trx: Transaction<BillingDB>,
  keys: { sessionId: string; messageId: string }[],
): Promise<UsageRow[]> {
  const { rows } = await sql<UsageRow>`
    SELECT u.* FROM unnest(${keys.map((k) => k.sessionId)}::uuid[], ${keys.map((k) => k.messageId)}::text[])
      AS k (session_id, message_id)
    JOIN usage_records u ON u.session_id = k.session_id AND u.message_id = k.message_id`.execute(trx);
  return rows;
}

/** A usage record as `openUsageBatch` reads it (JSON: times as text, numbers exact as text). */
type RecordJson = Omit<UsageRow, 'session_id' | 'reported_at' | 'created_at'> & {
  reported_at: string;
  created_at: string;
};

/** The statement that writes usage records, one array parameter per column (run by `writeBilledSessions`). */
export function usageRecordsInsert(rows: UsageRow[]): RawBuilder<unknown> {
  const column = <T>(f: (r: UsageRow) => T) => rows.map(f);
  const iso = (d: Date | string) => (d instanceof Date ? d.toISOString() : d);
  return sql`
    INSERT INTO usage_records
      (id, session_id, message_id, reported_at, gpu_utilization, power_draw_w, metrics, billed_minutes, cost, created_at)
    SELECT id, session_id, message_id, reported_at, gpu_utilization, power_draw_w, metrics::jsonb, billed_minutes,
      cost, created_at
    FROM unnest(
      ${column((r) => r.id)}::uuid[], ${column((r) => r.session_id)}::uuid[], ${column((r) => r.message_id)}::text[],
      ${column((r) => iso(r.reported_at))}::timestamptz[], ${column((r) => r.gpu_utilization)}::numeric[],
      ${column((r) => r.power_draw_w)}::numeric[],
      ${column((r) => (r.metrics === null ? null : JSON.stringify(r.metrics)))}::text[],
      ${column((r) => r.billed_minutes)}::int[], ${column((r) => r.cost)}::numeric[],
      ${column((r) => iso(r.created_at))}::timestamptz[]
    ) AS r (id, session_id, message_id, reported_at, gpu_utilization, power_draw_w, metrics, billed_minutes, cost,
      created_at)`;
}
