/** Queries on storage charges (a user's stored bytes per period). Every function takes the database or a transaction. */
import { lockName } from '@gpu/common';
import type { Insertable, Kysely, Selectable, Transaction } from 'kysely';
import type { KeysetPosition } from '../domain/keyset.ts';
import { cursorAt, olderThan } from './keyset-sql.ts';
import type { BillingDB, StorageChargeTable } from './schema.ts';

type Db = Kysely<BillingDB> | Transaction<BillingDB>;

export type StorageChargeRow = Selectable<StorageChargeTable>;

/**
 * Serialises the charges of one user until the transaction ends (a transaction-scoped advisory lock on the user's
 * ID), so the check that a period overlaps none charged and the charge itself are one step.
 */
export async function lockUserStorage(trx: Transaction<BillingDB>, userId: string): Promise<void> {
  await lockName(trx, `storage:${userId.toLowerCase()}`);
}

/** The user's charges whose period overlaps `[start, end)`. */
export async function overlappingCharges(db: Db, userId: string, start: Date, end: Date): Promise<StorageChargeRow[]> {
  return db
    .selectFrom('storage_charges')
    .selectAll()
    .where('user_id', '=', userId)
    .where('period_start', '<', end)
    .where('period_end', '>', start)
    .orderBy('period_start')
    .execute();
}

export async function insertStorageCharge(db: Db, values: Insertable<StorageChargeTable>): Promise<StorageChargeRow> {
  return db.insertInto('storage_charges').values(values).returningAll().executeTakeFirstOrThrow();
}

/** Which charges a list shows: one user's (or everyone's), periods starting in [from, to). */
export interface StorageChargeFilter {
  userId?: string;
  from?: Date;
  to?: Date;
}

/** Up to `limit` charges after `after`, newest period first, each with its cursor time. */
export async function listStorageCharges(
  db: Db,
  f: StorageChargeFilter,
  after: KeysetPosition | undefined,
  limit: number,
): Promise<(StorageChargeRow & { cursor_at: string })[]> {
  let q = db.selectFrom('storage_charges').selectAll().select(cursorAt('period_start').as('cursor_at'));
  if (f.userId) q = q.where('user_id', '=', f.userId);
  if (f.from) q = q.where('period_start', '>=', f.from);
  if (f.to) q = q.where('period_start', '<', f.to);
  if (after) q = q.where(olderThan('period_start', after));
  return q.orderBy('period_start', 'desc').orderBy('id', 'desc').limit(limit).execute();
}

/** The user's charges with something unpaid, oldest period first (under the user's lock: `lockUserStorage`). */
export async function unpaidStorageCharges(trx: Transaction<BillingDB>, userId: string): Promise<StorageChargeRow[]> {
  return trx
    .selectFrom('storage_charges')
    .selectAll()
    .where('user_id', '=', userId)
    .where('unpaid', '>', '0')
    .orderBy('period_start')
    .execute();
}

/** Moves `amount` of a charge from unpaid to charged (collected later). */
export async function collectStorageCharge(trx: Transaction<BillingDB>, id: string, amount: string): Promise<void> {
  const result = await trx
    .updateTable('storage_charges')
    .set((eb) => ({ charged: eb('charged', '+', amount), unpaid: eb('unpaid', '-', amount) }))
    .where('id', '=', id)
    .where('unpaid', '>=', amount)
    .executeTakeFirst();
  if (Number(result.numUpdatedRows) !== 1) throw new Error(`storage charge ${id} has less than ${amount} unpaid`);
}
