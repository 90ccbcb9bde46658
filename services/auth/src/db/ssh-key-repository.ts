/** Queries on users' SSH public keys. Every function takes the database or a transaction. */
import { cursorAt, type KeysetPosition, newerThan } from '@gpu/common';
import type { Kysely, Selectable } from 'kysely';
import type { AuthDatabase, SshKeysTable } from './schema.ts';

export type SshKeyRow = Selectable<SshKeysTable>;

export async function insertSshKey(
  db: Kysely<AuthDatabase>,
  key: Pick<SshKeyRow, 'id' | 'user_id' | 'name' | 'type' | 'fingerprint' | 'public_key'>,
): Promise<SshKeyRow> {
  return db.insertInto('ssh_keys').values(key).returningAll().executeTakeFirstOrThrow();
}

/** One page of a user's keys, oldest first, after `after` (keyset on `created_at`, `id`). */
export async function listSshKeys(
  db: Kysely<AuthDatabase>,
  filter: { userId: string; limit: number; after?: KeysetPosition },
): Promise<(SshKeyRow & { cursor_at: string })[]> {
  let q = db
    .selectFrom('ssh_keys')
    .selectAll()
    .select(cursorAt('created_at').as('cursor_at'))
    .where('user_id', '=', filter.userId);
  if (filter.after) q = q.where(newerThan('created_at', filter.after));
  return q.orderBy('created_at').orderBy('id').limit(filter.limit).execute();
}

/** How many keys the user holds. */
export async function countSshKeys(db: Kysely<AuthDatabase>, userId: string): Promise<number> {
  const row = await db
    .selectFrom('ssh_keys')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('user_id', '=', userId)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

/** Deletes the user's key `id`; the row deleted, or undefined when the user holds no such key. */
export async function deleteSshKey(
  db: Kysely<AuthDatabase>,
  userId: string,
  id: string,
): Promise<SshKeyRow | undefined> {
  return db.deleteFrom('ssh_keys').where('id', '=', id).where('user_id', '=', userId).returningAll().executeTakeFirst();
}

/** Deletes every key of the user (the account started afresh: keys registered by whoever held it go); how many. */
export async function deleteUserSshKeys(db: Kysely<AuthDatabase>, userId: string): Promise<number> {
  const result = await db.deleteFrom('ssh_keys').where('user_id', '=', userId).executeTakeFirst();
  return Number(result.numDeletedRows);
}
