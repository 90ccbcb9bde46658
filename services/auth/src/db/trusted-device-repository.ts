/** Queries on trusted devices. Every function takes the database or a transaction. */
import type { Kysely, QueryCreator } from 'kysely';
import type { AuthDatabase } from './schema.ts';

/**
 * What a login writes about the caller's device: a newly trusted device, or the use of one it knew. It is written
 * in the statement that stores the login's refresh token (`insertRefreshToken`), one round trip and one commit.
 */
export type DeviceWrite =
  | { insert: { user_id: string; token_hash: string; expires_at: Date; epoch: number } }
  | { touch: string };

/** `db` with the device write as a data-modifying WITH query, for the statement that follows to carry it. */
export function withDeviceWrite(db: Kysely<AuthDatabase>, device: DeviceWrite): QueryCreator<AuthDatabase> {
  if ('insert' in device) {
    return db.with('device_write', (q) => q.insertInto('trusted_devices').values(device.insert)) as never;
  }
  return db.with('device_write', (q) =>
    q.updateTable('trusted_devices').set({ last_used_at: new Date() }).where('id', '=', device.touch),
  ) as never;
}

/** Forgets every trusted device of the user (a password reset: none of them is known to be the user's). */
export async function forgetUserDevices(db: Kysely<AuthDatabase>, userId: string): Promise<void> {
  await db.deleteFrom('trusted_devices').where('user_id', '=', userId).execute();
}
