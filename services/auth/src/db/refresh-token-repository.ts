/** Queries on refresh tokens and their families. Every function takes the database or a transaction. */
import { cursorAt, type KeysetPosition, newerThan } from '@gpu/common';
import { type Kysely, type Selectable, sql } from 'kysely';
import type { AuthDatabase, RefreshTokensTable } from './schema.ts';
import { type DeviceWrite, withDeviceWrite } from './trusted-device-repository.ts';

export type RefreshTokenRow = Selectable<RefreshTokensTable>;

/** Stores a refresh token and, for a login, what it writes about the caller's device, in one statement. */
export async function insertRefreshToken(
  db: Kysely<AuthDatabase>,
  token: {
    family_id: string;
    user_id: string;
    parent_id: string | null;
    token_hash: string;
    expires_at: Date;
    user_agent?: string | null;
    ip?: string | null;
    /** The account's epoch the sign-in began in (a login's: the user's; a rotation's: its family's). */
    epoch: number;
  },
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

/** A user's sign-in (a family of refresh tokens with a live one): when it began and was last used, and by what. */
export interface SignInRow {
  /** The family's ID. */
  id: string;
  signed_in_at: Date;
  last_used_at: Date;
  expires_at: Date;
  user_agent: string | null;
  ip: string | null;
  cursor_at: string;
}

/**
 * One page of the user's sign-ins still alive (a token neither used, revoked nor expired), the oldest first, after
 * `after` (keyset on when each began, and its ID).
 */
export async function liveSignIns(
  db: Kysely<AuthDatabase>,
  filter: { userId: string; now: Date; limit: number; after?: KeysetPosition },
): Promise<SignInRow[]> {
  const families = db
    .selectFrom('refresh_tokens')
    .select((eb) => [
      'family_id as id',
      eb.fn.min('created_at').as('signed_in_at'),
      eb.fn.max('created_at').as('last_used_at'),
      eb.fn.max('expires_at').as('expires_at'),
      sql<string | null>`(array_agg(user_agent ORDER BY created_at DESC))[1]`.as('user_agent'),
      sql<string | null>`(array_agg(ip ORDER BY created_at DESC))[1]`.as('ip'),
    ])
    .where('user_id', '=', filter.userId)
    .where('epoch', '=', userEpoch(filter.userId))
    .groupBy('family_id')
    .having(sql<boolean>`bool_or(revoked_at IS NULL AND used_at IS NULL AND expires_at > ${filter.now})`);
  let q = db.selectFrom(families.as('s')).selectAll().select(cursorAt('signed_in_at').as('cursor_at'));
  if (filter.after) q = q.where(newerThan('signed_in_at', filter.after));
  const rows = await q.orderBy('signed_in_at').orderBy('id').limit(filter.limit).execute();
  return rows as unknown as SignInRow[];
}

/** How many sign-ins of the user are alive. */
export async function countLiveSignIns(db: Kysely<AuthDatabase>, userId: string, now: Date): Promise<number> {
  const row = await db
    .selectFrom('refresh_tokens')
    .select(sql<string>`count(DISTINCT family_id)`.as('n'))
    .where('user_id', '=', userId)
    .where('revoked_at', 'is', null)
    .where('used_at', 'is', null)
    .where('expires_at', '>', now)
    .where('epoch', '=', userEpoch(userId))
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

/** The user's current epoch, as a scalar subquery (a sign-in of an earlier one is dead). */
const userEpoch = (userId: string) => sql<number>`(SELECT epoch FROM users WHERE id = ${userId})`;

/** The epoch a sign-in began in (what a credential made with it records), or undefined for an unknown one. */
export async function signInEpoch(db: Kysely<AuthDatabase>, familyId: string): Promise<number | undefined> {
  const row = await db
    .selectFrom('refresh_tokens')
    .select('epoch')
    .where('family_id', '=', familyId)
    .limit(1)
    .executeTakeFirst();
  return row?.epoch;
}

/** Revokes every live family of the user but `keep` (a family ID); how many tokens were revoked. */
export async function revokeUserFamilies(
  db: Kysely<AuthDatabase>,
  userId: string,
  reason: string,
  keep?: string,
): Promise<number> {
  let q = db
    .updateTable('refresh_tokens')
    .set({ revoked_at: new Date(), revoked_reason: reason })
    .where('user_id', '=', userId)
    .where('revoked_at', 'is', null);
  if (keep) q = q.where('family_id', '!=', keep);
  const result = await q.executeTakeFirst();
  return Number(result.numUpdatedRows);
}

/** The user who owns a family, or undefined. */
export async function familyOwner(db: Kysely<AuthDatabase>, familyId: string): Promise<string | undefined> {
  const row = await db
    .selectFrom('refresh_tokens')
    .select('user_id')
    .where('family_id', '=', familyId)
    .limit(1)
    .executeTakeFirst();
  return row?.user_id;
}
