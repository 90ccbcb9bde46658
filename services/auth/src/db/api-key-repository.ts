/** Queries on users' API keys. Every function takes the database or a transaction. */
import { cursorAt, type KeysetPosition, newerThan } from '@gpu/common';
import { type Kysely, type Selectable, sql } from 'kysely';
import type { ApiKeysTable, AuthDatabase } from './schema.ts';

export type ApiKeyRow = Selectable<ApiKeysTable>;

export async function insertApiKey(
  db: Kysely<AuthDatabase>,
  key: Pick<ApiKeyRow, 'id' | 'user_id' | 'name' | 'prefix' | 'secret_hash' | 'scopes' | 'expires_at' | 'epoch'>,
): Promise<ApiKeyRow> {
  return db.insertInto('api_keys').values(key).returningAll().executeTakeFirstOrThrow();
}

export async function findApiKey(db: Kysely<AuthDatabase>, id: string): Promise<ApiKeyRow | undefined> {
  return db.selectFrom('api_keys').selectAll().where('id', '=', id).executeTakeFirst();
}

/**
 * A key with whether it belongs to its user's current epoch (`current`: false once the account started afresh), for
 * the key's exchange and its tokens; undefined for an unknown key or a user gone.
 */
export async function findApiKeyOfUser(
  db: Kysely<AuthDatabase>,
  id: string,
): Promise<(ApiKeyRow & { current: boolean }) | undefined> {
  return db
    .selectFrom('api_keys')
    .innerJoin('users', 'users.id', 'api_keys.user_id')
    .selectAll('api_keys')
    .select(sql<boolean>`api_keys.epoch = users.epoch`.as('current'))
    .where('api_keys.id', '=', id)
    .executeTakeFirst();
}

/** One page of a user's keys, oldest first, after `after` (keyset on `created_at`, `id`; revoked ones when asked). */
export async function listApiKeys(
  db: Kysely<AuthDatabase>,
  filter: { userId: string; includeRevoked: boolean; limit: number; after?: KeysetPosition },
): Promise<(ApiKeyRow & { cursor_at: string })[]> {
  let q = db
    .selectFrom('api_keys')
    .selectAll()
    .select(cursorAt('created_at').as('cursor_at'))
    .where('user_id', '=', filter.userId);
  if (!filter.includeRevoked) q = q.where('revoked_at', 'is', null);
  if (filter.after) q = q.where(newerThan('created_at', filter.after));
  return q.orderBy('created_at').orderBy('id').limit(filter.limit).execute();
}

/** How many keys the user holds that are not revoked. */
export async function countActiveApiKeys(db: Kysely<AuthDatabase>, userId: string): Promise<number> {
  const row = await db
    .selectFrom('api_keys')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('user_id', '=', userId)
    .where('revoked_at', 'is', null)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

/** Revokes the key (once: a second revocation keeps the first time): the key revoked now, undefined when it was already. */
export async function revokeApiKey(db: Kysely<AuthDatabase>, id: string): Promise<ApiKeyRow | undefined> {
  return db
    .updateTable('api_keys')
    .set({ revoked_at: new Date() })
    .where('id', '=', id)
    .where('revoked_at', 'is', null)
    .returningAll()
    .executeTakeFirst();
}

/** Revokes every key of the user (a password reset: keys made by whoever held the account go with it); how many. */
export async function revokeUserApiKeys(db: Kysely<AuthDatabase>, userId: string): Promise<number> {
  const result = await db
    .updateTable('api_keys')
    .set({ revoked_at: new Date() })
    .where('user_id', '=', userId)
    .where('revoked_at', 'is', null)
    .executeTakeFirst();
  return Number(result.numUpdatedRows);
}

/** Records that the key was just used (at most once a minute, so a busy program does not write at every exchange). */
export async function touchApiKey(db: Kysely<AuthDatabase>, id: string): Promise<void> {
  await db
    .updateTable('api_keys')
    .set({ last_used_at: new Date() })
    .where('id', '=', id)
    .where((eb) => eb.or([eb('last_used_at', 'is', null), eb('last_used_at', '<', new Date(Date.now() - 60_000))]))
    .execute();
}
