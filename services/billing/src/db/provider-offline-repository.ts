/**
 * What following a provider's machine reads: its running sessions and what each was last reported at (to end them
 * when it stops delivering). Binding them to the machine's daemon is written by session-repository.ts.
 */
import type { Kysely, Transaction } from 'kysely';
import type { BillingDB, SessionStatus } from './schema.ts';

type Db = Kysely<BillingDB> | Transaction<BillingDB>;

/** IDs of the provider's sessions in `statuses`, in ID order. */
export async function sessionIdsOfProvider(
  db: Db,
  providerId: string,
  statuses: readonly SessionStatus[],
): Promise<string[]> {
  const rows = await db
    .selectFrom('rental_sessions')
    .select('id')
    .where('provider_id', '=', providerId)
    .where('status', 'in', statuses)
    .orderBy('id')
    .execute();
  return rows.map((r) => r.id);
}

/**
 * The minutes the session had been billed when its newest usage report arrived no later than `upTo` (each usage
 * record keeps them, with its arrival time on billing's clock; they never decrease), or 0 when none arrived.
 */
export async function minutesAtLastReport(db: Db, sessionId: string, upTo: Date): Promise<number> {
  const row = await db
    .selectFrom('usage_records')
    .select((eb) => eb.fn.max('billed_minutes').as('minutes'))
    .where('session_id', '=', sessionId)
    .where('created_at', '<=', upTo)
    .executeTakeFirst();
  return Number(row?.minutes ?? 0);
}

/** The providers that have sessions in `statuses` (at most `limit`, in ID order after `after`). */
export async function providersWithSessions(
  db: Db,
  statuses: readonly SessionStatus[],
  limit: number,
  after?: string,
): Promise<string[]> {
  let q = db.selectFrom('rental_sessions').select('provider_id').distinct().where('status', 'in', statuses);
  if (after) q = q.where('provider_id', '>', after);
  const rows = await q.orderBy('provider_id').limit(limit).execute();
  return rows.map((r) => r.provider_id);
}
