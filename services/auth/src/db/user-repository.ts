/** Queries on users. Every function takes the database or a transaction. */
import type { UserRole as Role } from '@gpu/common';
import { type Kysely, type Selectable, sql } from 'kysely';
import type { AuthDatabase, UsersTable } from './schema.ts';

export type UserRow = Selectable<UsersTable>;

const UNIQUE_VIOLATION = '23505';

/** Whether a database error is a unique-constraint violation (a concurrent duplicate insert). */
export function isUniqueViolation(err: unknown): boolean {
  return (err as { code?: unknown })?.code === UNIQUE_VIOLATION;
}

export async function insertUser(
  db: Kysely<AuthDatabase>,
  user: { email: string; password_hash: string; roles: Role[] },
): Promise<UserRow> {
  return db
    .insertInto('users')
    .values({ email: user.email, password_hash: user.password_hash, roles: sql<Role[]>`${user.roles}::text[]` })
    .returningAll()
    .executeTakeFirstOrThrow();
}

export async function findUserByEmail(db: Kysely<AuthDatabase>, email: string): Promise<UserRow | undefined> {
  return db.selectFrom('users').selectAll().where('email', '=', email).executeTakeFirst();
}

/**
 * A login's one read: the user with this email and, when a device token's hash is given, the ID of that user's
 * unexpired trusted device with it (null when there is none).
 */
export async function findUserForLogin(
  db: Kysely<AuthDatabase>,
  email: string,
  deviceTokenHash: string | undefined,
): Promise<(UserRow & { device_id: string | null }) | undefined> {
  return db
    .selectFrom('users')
    .selectAll('users')
    .select((eb) =>
      deviceTokenHash === undefined
        ? sql<string | null>`null::uuid`.as('device_id')
        : eb
            .selectFrom('trusted_devices')
            .select('trusted_devices.id')
            .whereRef('trusted_devices.user_id', '=', 'users.id')
            .where('trusted_devices.token_hash', '=', deviceTokenHash)
            .where('trusted_devices.expires_at', '>', new Date())
            .whereRef('trusted_devices.epoch', '=', 'users.epoch')
            .limit(1)
            .$asScalar()
            .as('device_id'),
    )
    .where('email', '=', email)
    .executeTakeFirst();
}

export async function findUserById(db: Kysely<AuthDatabase>, id: string): Promise<UserRow | undefined> {
  return db.selectFrom('users').selectAll().where('id', '=', id).executeTakeFirst();
}

/**
 * The user, held shared until the transaction ends: a refresh or login writing a token of theirs. A revocation of
 * their sign-ins, which takes the user alone (`lockUser`), waits for it, and one under way holds it back.
 */
export async function shareUser(db: Kysely<AuthDatabase>, id: string): Promise<UserRow | undefined> {
  return db.selectFrom('users').selectAll().where('id', '=', id).forShare().executeTakeFirst();
}

/** The user, locked until the transaction ends (changes to one account's codes and password one at a time). */
export async function lockUser(db: Kysely<AuthDatabase>, id: string): Promise<UserRow | undefined> {
  return db.selectFrom('users').selectAll().where('id', '=', id).forUpdate().executeTakeFirst();
}

/**
 * Starts the account's next epoch for whoever proved they read its mail: the password is theirs, the address verified;
 * every credential of the epoch before is dead from the commit on (domain/accounts/epochs.ts).
 */
export async function startNextEpoch(
  db: Kysely<AuthDatabase>,
  id: string,
  passwordHash: string,
  now: Date,
): Promise<UserRow> {
  return db
    .updateTable('users')
    .set((eb) => ({
      epoch: eb('epoch', '+', 1),
      password_hash: passwordHash,
      email_verified_at: eb.fn.coalesce('email_verified_at', eb.val(now)),
      updated_at: now,
    }))
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirstOrThrow();
}

export async function updatePasswordHash(db: Kysely<AuthDatabase>, id: string, hash: string): Promise<void> {
  await db.updateTable('users').set({ password_hash: hash, updated_at: new Date() }).where('id', '=', id).execute();
}

export async function updateRoles(db: Kysely<AuthDatabase>, id: string, roles: Role[]): Promise<UserRow | undefined> {
  return db
    .updateTable('users')
    .set({ roles: sql<Role[]>`${roles}::text[]`, updated_at: new Date() })
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirst();
}

/** IDs of the admins, locked until the transaction ends (serialises changes to who is admin). */
export async function lockAdmins(db: Kysely<AuthDatabase>): Promise<string[]> {
  const rows = await db
    .selectFrom('users')
    .select('id')
    .where(sql<boolean>`'admin' = ANY (roles)`)
    .forUpdate()
    .execute();
  return rows.map((r) => r.id);
}

/**
 * Serialises the creation of the initial admin until the transaction ends (instances starting together), even
 * while no admin row exists to lock.
 */
export async function lockInitialAdminCreation(db: Kysely<AuthDatabase>): Promise<void> {
  await sql`SELECT pg_advisory_xact_lock(hashtext('auth-service-initial-admin'))`.execute(db);
}
