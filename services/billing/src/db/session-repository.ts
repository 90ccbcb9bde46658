/** Queries on rental sessions. Every function takes the database or a transaction. */
import type { Insertable, Kysely, Selectable, Transaction, Updateable } from 'kysely';
import type { BillingDB, RentalSessionTable } from './schema.ts';

type Db = Kysely<BillingDB> | Transaction<BillingDB>;

export type SessionRow = Selectable<RentalSessionTable>;

/** A session's row, optionally locked until the transaction ends. */
export async function findSession(db: Db, id: string, lock = false): Promise<SessionRow | undefined> {
  let q = db.selectFrom('rental_sessions').selectAll().where('id', '=', id);
  if (lock) q = q.forUpdate();
  return q.executeTakeFirst();
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
