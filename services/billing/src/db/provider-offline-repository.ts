/**
 * What following a provider's machine reads and writes: its running sessions, what each was last reported at (to end
 * them when it stops delivering), and the daemon each takes reports from (to follow its binding).
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
