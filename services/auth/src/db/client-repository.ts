/** Queries on machine clients. Every function takes the database or a transaction. */
import { cursorAt, type KeysetPosition, newerThan } from '@gpu/common';
import { type Kysely, type Selectable, sql } from 'kysely';
import type { AuthDatabase, ClientsTable } from './schema.ts';

export type ClientRow = Selectable<ClientsTable>;

export async function insertClient(
  db: Kysely<AuthDatabase>,
  client: Pick<ClientRow, 'name' | 'role' | 'owner_id' | 'secret_hash' | 'created_by'> & { owner_epoch?: number },
): Promise<ClientRow> {
  return db.insertInto('clients').values(client).returningAll().executeTakeFirstOrThrow();
}

export async function findClient(db: Kysely<AuthDatabase>, id: string): Promise<ClientRow | undefined> {
  return db.selectFrom('clients').selectAll().where('id', '=', id).executeTakeFirst();
}

/**
 * The active (not revoked) platform client of this name: one without an owner (names are unique per owner, so a
 * provider's daemon may carry a platform client's name and is never found here).
 */
export async function findActivePlatformClient(db: Kysely<AuthDatabase>, name: string): Promise<ClientRow | undefined> {
  return db
    .selectFrom('clients')
    .selectAll()
    .where('name', '=', name)
    .where('owner_id', 'is', null)
    .where('revoked_at', 'is', null)
    .executeTakeFirst();
}

/** One page of clients, oldest first, after the position `after` (keyset on `created_at`, `id`). */
export async function listClients(
  db: Kysely<AuthDatabase>,
  filter: { ownerId?: string; includeRevoked: boolean; limit: number; after?: KeysetPosition },
): Promise<(ClientRow & { cursor_at: string })[]> {
  let q = db.selectFrom('clients').selectAll().select(cursorAt('created_at').as('cursor_at'));
  if (filter.ownerId !== undefined) q = q.where('owner_id', '=', filter.ownerId);
  if (!filter.includeRevoked) q = q.where('revoked_at', 'is', null);
  if (filter.after) q = q.where(newerThan('created_at', filter.after));
  return q.orderBy('created_at').orderBy('id').limit(filter.limit).execute();
}

/** Replaces the secret; the old one stays valid until `previousValidUntil` (now or earlier: at once invalid). */
export async function rotateSecret(
  db: Kysely<AuthDatabase>,
  id: string,
  secretHash: string,
  previousValidUntil: Date,
): Promise<ClientRow | undefined> {
  return db
    .updateTable('clients')
    .set((eb) => ({
      previous_secret_hash: eb.ref('secret_hash'),
      previous_secret_expires_at: previousValidUntil,
      secret_hash: secretHash,
      rotated_at: new Date(),
    }))
    .where('id', '=', id)
    .where('revoked_at', 'is', null)
    .returningAll()
    .executeTakeFirst();
}

export async function revokeClient(db: Kysely<AuthDatabase>, id: string): Promise<ClientRow | undefined> {
  return db
    .updateTable('clients')
    .set({ revoked_at: new Date() })
    .where('id', '=', id)
    .where('revoked_at', 'is', null)
    .returningAll()
    .executeTakeFirst();
}

/** Revokes every client acting for the user (their daemons); how many. */
export async function revokeOwnedClients(db: Kysely<AuthDatabase>, ownerId: string): Promise<number> {
  const result = await db
    .updateTable('clients')
    .set({ revoked_at: new Date() })
    .where('owner_id', '=', ownerId)
    .where('revoked_at', 'is', null)
    .executeTakeFirst();
  return Number(result.numUpdatedRows);
}

/** Serialises the start-up creation of platform clients until the transaction ends (instances starting together). */
export async function lockBootstrapClients(db: Kysely<AuthDatabase>): Promise<void> {
  await sql`SELECT pg_advisory_xact_lock(hashtext('auth-service-bootstrap-clients'))`.execute(db);
}

export async function touchClient(db: Kysely<AuthDatabase>, id: string): Promise<void> {
  await db.updateTable('clients').set({ last_used_at: new Date() }).where('id', '=', id).execute();
}
