/**
 * The start lock of resumable uploads (`domain/uploads/resumable.ts`, `StartLock`): a transaction-scoped advisory lock
 * of the storage database per owner, so the instances sharing the database start one owner's uploads one at a time.
 * The lock goes with its transaction, so an instance that dies holding it frees it with its connection.
 */
import { lockName } from '@gpu/common';
import type { Kysely } from 'kysely';
import type { StartLock } from '../domain/uploads/resumable.ts';
import type { StorageDB } from './schema.ts';

/**
 * The start lock over the service's database. An embedded database (PGlite) belongs to one process, whose own queue of
 * starts (in `Uploads`) is the whole lock: a transaction there would hold its one connection, and with it every query
 * of the object catalog, for a start's round trips to the store.
 */
export function uploadStartLock(db: Kysely<StorageDB>, kind: 'postgres' | 'pglite'): StartLock {
  if (kind === 'pglite') return { hold: (_owner, fn) => fn() };
  return {
    hold: (owner, fn) =>
      db.transaction().execute(async (trx) => {
        await lockName(trx, `storage-upload-starts:${owner}`);
        return fn();
      }),
  };
}
