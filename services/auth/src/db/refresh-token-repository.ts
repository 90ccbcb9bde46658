/** Queries on refresh tokens and their families. Every function takes the database or a transaction. */
import type { Kysely, Selectable } from 'kysely';
import type { AuthDatabase, RefreshTokensTable } from './schema.ts';
import { type DeviceWrite, withDeviceWrite } from './trusted-device-repository.ts';

export type RefreshTokenRow = Selectable<RefreshTokensTable>;

/** Stores a refresh token and, for a login, what it writes about the caller's device, in one statement. */
export async function insertRefreshToken(
  db: Kysely<AuthDatabase>,
  token: { family_id: string; user_id: string; parent_id: string | null; token_hash: string; expires_at: Date },
  device?: DeviceWrite,
): Promise<void> {
  await (device ? withDeviceWrite(db, device) : db).insertInto('refresh_tokens').values(token).execute();
}

/** The token with this hash, locked until the transaction ends so two refreshes of it run one after the other. */
export async function findRefreshTokenForUpdate(
  db: Kysely<AuthDatabase>,
  tokenHash: string,
): Promise<RefreshTokenRow | undefined> {
  return db.selectFrom('refresh_tokens').selectAll().where('token_hash', '=', tokenHash).forUpdate().executeTakeFirst();
}

export async function findRefreshToken(
  db: Kysely<AuthDatabase>,
  tokenHash: string,
): Promise<RefreshTokenRow | undefined> {
  return db.selectFrom('refresh_tokens').selectAll().where('token_hash', '=', tokenHash).executeTakeFirst();
}

export async function markUsed(db: Kysely<AuthDatabase>, id: string, at: Date): Promise<void> {
  await db.updateTable('refresh_tokens').set({ used_at: at }).where('id', '=', id).execute();
}

/** Revokes every live token of a family; returns how many were revoked. */
export async function revokeFamily(
  db: Kysely<AuthDatabase>,
  familyId: string,
  reason: string,
  at: Date = new Date(),
): Promise<number> {
  const result = await db
    .updateTable('refresh_tokens')
    .set({ revoked_at: at, revoked_reason: reason })
    .where('family_id', '=', familyId)
    .where('revoked_at', 'is', null)
    .executeTakeFirst();
  return Number(result.numUpdatedRows);
}

/** Deletes tokens that expired before `before`; returns how many. */
export async function deleteExpired(db: Kysely<AuthDatabase>, before: Date): Promise<number> {
  const result = await db.deleteFrom('refresh_tokens').where('expires_at', '<', before).executeTakeFirst();
  return Number(result.numDeletedRows);
}
