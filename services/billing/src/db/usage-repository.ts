/** Queries on usage records (one per applied report). Statements are set-based: one per batch, whatever its size. */
import { type Selectable, sql, type Transaction } from 'kysely';
import type { BillingDB, UsageRecordTable } from './schema.ts';

export type UsageRow = Selectable<UsageRecordTable>;

/**
 * The usage records already written for these (session, message ID) pairs (a pair asked twice may come back
 * twice). Written as a join from the keys, which PostgreSQL runs as one probe of the (session_id, message_id)
 * index per key; the `IN (SELECT ... unnest)` form it replaces was planned as a hash semi-join over a sequential
 * scan of the whole table, whose cost grows with every record ever written (60 ms a batch at 30,000 records).
 */
export async function existingUsageRecords(
  trx: Transaction<BillingDB>,
  keys: { sessionId: string; messageId: string }[],
): Promise<UsageRow[]> {
  const { rows } = await sql<UsageRow>`
    SELECT u.* FROM unnest(${keys.map((u) => u.sessionId)}::uuid[], ${keys.map((u) => u.messageId)}::text[])
      AS k (session_id, message_id)
    JOIN usage_records u ON u.session_id = k.session_id AND u.message_id = k.message_id`.execute(trx);
  return rows;
}

/** Writes usage records in one statement whatever their number: one array parameter per column. */
export async function insertUsageRecords(trx: Transaction<BillingDB>, rows: UsageRow[]): Promise<void> {
  const column = <T>(f: (r: UsageRow) => T) => rows.map(f);
  const iso = (d: Date | string) => (d instanceof Date ? d.toISOString() : d);
  await sql`
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
      created_at)`.execute(trx);
}
