/** Browsers' ways into workloads' ports (migration 0031; domain/reach/port-grants.ts): links' tickets and cookies. */
import { type Insertable, type Kysely, type Selectable, sql } from 'kysely';
import type { BillingDB } from './schema.ts';

type PortGrantTable = BillingDB['port_grants'];
export type PortGrantRow = Selectable<PortGrantTable>;

/**
 * Adds a link's ticket or a browser's cookie, then keeps it and the session's newest `keep - 1` other grants that
 * still hold and deletes the rest: expired ones first, then those made before the ones kept (their browsers are signed
 * out). The new one is never among those deleted, whatever others were made in the same millisecond.
 */
export async function insertPortGrant(
  db: Kysely<BillingDB>,
  row: Insertable<PortGrantTable>,
  keep: number,
): Promise<void> {
  await db.insertInto('port_grants').values(row).execute();
  await db
    .deleteFrom('port_grants')
    .where('secret_hash', 'in', (eb) =>
      eb
        .selectFrom('port_grants')
        .select('secret_hash')
        .where('session_id', '=', row.session_id)
        .where('secret_hash', '!=', row.secret_hash)
        .orderBy(sql`expires_at > ${row.created_at}`, 'desc')
        .orderBy('created_at', 'desc')
        .offset(keep - 1),
    )
    .execute();
}

/** Takes a link's ticket out, once: of two browsers opening the same link, one gets it (expired or not). */
export async function takeTicket(db: Kysely<BillingDB>, secretHash: Buffer): Promise<PortGrantRow | undefined> {
  return db
    .deleteFrom('port_grants')
    .where('secret_hash', '=', secretHash)
    .where('kind', '=', 'ticket')
    .returningAll()
    .executeTakeFirst();
}

/** A browser's cookie grant that has not expired by `now`. */
export async function findCookieGrant(
  db: Kysely<BillingDB>,
  secretHash: Buffer,
  now: Date,
): Promise<PortGrantRow | undefined> {
  return db
    .selectFrom('port_grants')
    .selectAll()
    .where('secret_hash', '=', secretHash)
    .where('kind', '=', 'cookie')
    .where('expires_at', '>', now)
    .executeTakeFirst();
}

/** Forgets grants that expired before `before` (at most `limit`); how many went. */
export async function purgeExpiredPortGrants(db: Kysely<BillingDB>, before: Date, limit: number): Promise<number> {
  const gone = await db
    .deleteFrom('port_grants')
    .where('secret_hash', 'in', (eb) =>
      eb.selectFrom('port_grants').select('secret_hash').where('expires_at', '<', before).limit(limit),
    )
    .executeTakeFirst();
  return Number(gone.numDeletedRows);
}
