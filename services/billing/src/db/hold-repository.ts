/**
 * Queries on holds (domain/ledger/holds.ts has the rules). A hold step writes its
 * `lock`/`release` transaction records in the same statement as the hold row.
 * Every function takes a transaction (or the database, for reads).
 */
import { type Insertable, type Kysely, type Selectable, sql, type Transaction } from 'kysely';
import type { BillingDB, HoldStatus, HoldTable, TransactionTable } from './schema.ts';

type Trx = Transaction<BillingDB>;

export type HoldRow = Selectable<HoldTable>;

/** A transaction record written with a hold step. */
export type HoldRecord = Insertable<TransactionTable>;

/** What a step changes on the hold row: amounts added (decimal strings), the status, and when (the step's time). */
export interface HoldChange {
  addAmount?: string;
  addPosted?: string;
  addReleased?: string;
  status?: HoldStatus;
  at: Date;
}

/** A hold's row, locked until the transaction ends. */
export async function lockHold(trx: Trx, holdId: string): Promise<HoldRow | undefined> {
  return trx.selectFrom('holds').selectAll().where('id', '=', holdId).forUpdate().executeTakeFirst();
}

/** Writes a new pending hold and its `lock` record in one statement. */
export async function insertHold(
  trx: Trx,
  hold: { id: string; walletId: string; amount: string; reference: string | null; at: Date },
  lockRecord: HoldRecord,
): Promise<void> {
  await trx
    .with('lock_record', (db) => db.insertInto('transactions').values(lockRecord))
    .insertInto('holds')
    .values({
      id: hold.id,
      wallet_id: hold.walletId,
      status: 'pending',
      amount: hold.amount,
      reference: hold.reference,
      created_at: hold.at,
      updated_at: hold.at,
    })
    .execute();
}

/** Updates the hold row and writes the step's records in one statement; the row as updated. */
export async function updateHold(trx: Trx, holdId: string, change: HoldChange, records: HoldRecord[]) {
  const values = {
    amount: sql<string>`amount + ${change.addAmount ?? '0'}::numeric`,
    posted: sql<string>`posted + ${change.addPosted ?? '0'}::numeric`,
    released: sql<string>`released + ${change.addReleased ?? '0'}::numeric`,
    ...(change.status ? { status: change.status } : {}),
    updated_at: change.at,
  };
  if (records.length === 0) {
    return trx.updateTable('holds').set(values).where('id', '=', holdId).returningAll().executeTakeFirstOrThrow();
  }
  return trx
    .with('step_records', (db) => db.insertInto('transactions').values(records))
    .updateTable('holds')
    .set(values)
    .where('id', '=', holdId)
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** Several holds' rows, by ID (unknown IDs are absent). */
export async function findHolds(db: Trx | Kysely<BillingDB>, holdIds: string[]): Promise<HoldRow[]> {
  return db.selectFrom('holds').selectAll().where(sql<boolean>`id = ANY(${holdIds}::uuid[])`).execute();
}

/** A hold's row. */
export async function findHold(db: Trx | Kysely<BillingDB>, holdId: string): Promise<HoldRow | undefined> {
  return db.selectFrom('holds').selectAll().where('id', '=', holdId).executeTakeFirst();
}
