/** Queries on billing records (one per ended session). Every function takes the database or a transaction. */
import type { Insertable, Kysely, Selectable, Transaction } from 'kysely';
import type { KeysetPosition } from '../domain/keyset.ts';
import { cursorAt, olderThan, type Party, partyOf } from './keyset-sql.ts';
import type { BillingDB, BillingRecordTable } from './schema.ts';

type Db = Kysely<BillingDB> | Transaction<BillingDB>;

export type BillingRecordRow = Selectable<BillingRecordTable>;

/** Which billing records a list shows: by renter, provider, wallet, status, end time in [from, to). */
export interface BillingRecordFilter {
  userId?: string;
  providerId?: string;
  walletId?: string;
  status?: ('completed' | 'terminated')[];
  from?: Date;
  to?: Date;
  /** Only records this user took part in: as the renter or the machine's owner (`provider`: as the owner only). */
  party?: Party;
}

/** Up to `limit` billing records after `after`, newest end first, each with its cursor time. */
export async function listBillingRecords(
  db: Db,
  f: BillingRecordFilter,
  after: KeysetPosition | undefined,
  limit: number,
): Promise<(BillingRecordRow & { cursor_at: string })[]> {
  let q = db.selectFrom('billing_records').selectAll().select(cursorAt('ended_at').as('cursor_at'));
  if (f.party) q = q.where(partyOf(f.party));
  if (f.userId) q = q.where('user_id', '=', f.userId);
  if (f.providerId) q = q.where('provider_id', '=', f.providerId);
  if (f.walletId) q = q.where('wallet_id', '=', f.walletId);
  if (f.status?.length) q = q.where('status', 'in', f.status);
  if (f.from) q = q.where('ended_at', '>=', f.from);
  if (f.to) q = q.where('ended_at', '<', f.to);
  if (after) q = q.where(olderThan('ended_at', after));
  return q.orderBy('ended_at', 'desc').orderBy('id', 'desc').limit(limit).execute();
}

/** The billing record of an ended session. */
export async function billingRecordOfSession(db: Db, sessionId: string): Promise<BillingRecordRow> {
  return db.selectFrom('billing_records').selectAll().where('session_id', '=', sessionId).executeTakeFirstOrThrow();
}

/** Writes a billing record; its row as stored. */
export async function insertBillingRecord(db: Db, values: Insertable<BillingRecordTable>): Promise<BillingRecordRow> {
  return db.insertInto('billing_records').values(values).returningAll().executeTakeFirstOrThrow();
}
