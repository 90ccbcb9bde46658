/** Queries on trusted devices. Every function takes the database or a transaction. */
import type { Kysely } from 'kysely';
import type { AuthDatabase } from './schema.ts';

/** The device's ID when the token hash belongs to `userId` and has not expired. */
export async function findTrustedDevice(
  db: Kysely<AuthDatabase>,
  userId: string,
  tokenHash: string,
): Promise<string | undefined> {
  const row = await db
    .selectFrom('trusted_devices')
    .select('id')
    .where('token_hash', '=', tokenHash)
    .where('user_id', '=', userId)
    .where('expires_at', '>', new Date())
    .executeTakeFirst();
  return row?.id;
}

export async function insertTrustedDevice(
  db: Kysely<AuthDatabase>,
  device: { user_id: string; token_hash: string; expires_at: Date },
): Promise<void> {
  await db.insertInto('trusted_devices').values(device).execute();
}

export async function touchTrustedDevice(db: Kysely<AuthDatabase>, id: string): Promise<void> {
  await db.updateTable('trusted_devices').set({ last_used_at: new Date() }).where('id', '=', id).execute();
}
