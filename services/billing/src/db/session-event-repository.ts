/** Session events as billing keeps them for the sessions' parties (`session_events`, migration XIV). */
import { type Kysely, type Selectable, sql, type Transaction } from 'kysely';
import type { KeysetPosition } from '../domain/keyset.ts';
import { cursorAt, olderThan, type Party, partyOf } from './keyset-sql.ts';
import type { BillingDB, SessionEventTable } from './schema.ts';

type Db = Kysely<BillingDB> | Transaction<BillingDB>;

export type SessionEventRow = Selectable<SessionEventTable>;

/** Writes one session event (its time: the database's clock, read now); the time written. */
export async function insertSessionEvent(
  db: Db,
  e: { id: string; sessionId: string; userId: string; providerOwnerId: string | null; kind: string; data: object },
): Promise<Date> {
  const row = await db
    .insertInto('session_events')
    .values({
      id: e.id,
      session_id: e.sessionId,
      user_id: e.userId,
      provider_owner_id: e.providerOwnerId,
      kind: e.kind,
      data: JSON.stringify(e.data),
    })
    .returning('occurred_at')
    .executeTakeFirstOrThrow();
  return row.occurred_at;
}

/** Which events a list shows: of a party (renter or machine owner), a session, kinds. */
export interface SessionEventFilter {
  party?: Party;
  sessionId?: string;
  kinds?: string[];
}

/** Up to `limit` events, newest first, after `after`; each with its position's time. */
export async function listSessionEvents(
  db: Db,
  f: SessionEventFilter,
  after: KeysetPosition | undefined,
  limit: number,
): Promise<(SessionEventRow & { cursor_at: string })[]> {
  let q = db.selectFrom('session_events').selectAll().select(cursorAt('occurred_at').as('cursor_at'));
  if (f.party) q = q.where(partyOf(f.party));
  if (f.sessionId) q = q.where('session_id', '=', f.sessionId);
  if (f.kinds?.length) q = q.where('kind', 'in', f.kinds);
  if (after) q = q.where(olderThan('occurred_at', after));
  return q.orderBy('occurred_at', 'desc').orderBy('id', 'desc').limit(limit).execute();
}

/** Deletes up to `limit` events older than `retentionMs` by the database's clock (which dates them); how many went. */
export async function purgeSessionEvents(db: Db, retentionMs: number, limit: number): Promise<number> {
  const result = await db
    .deleteFrom('session_events')
    .where('id', 'in', (eb) =>
      eb
        .selectFrom('session_events')
        .select('id')
        .where('occurred_at', '<', sql<Date>`clock_timestamp() - ${retentionMs} * interval '1 millisecond'`)
        .limit(limit),
    )
    .executeTakeFirst();
  return Number(result.numDeletedRows);
}
