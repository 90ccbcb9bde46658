/** Reach's records (migrations 0026, 0027): which instance holds each machine's relay connection, the bytes streams carried, the SSH host key. */
import { type Kysely, sql } from 'kysely';
import type { BillingDB } from './schema.ts';

export interface ReachLinkRow {
  providerId: string;
  instanceId: string;
  url: string;
  linkId: string;
}

/** Records that this instance holds the machine's connection now (replacing whichever held it before). */
export async function claimReachLink(db: Kysely<BillingDB>, link: ReachLinkRow, at: Date): Promise<void> {
  const row = {
    provider_id: link.providerId,
    instance_id: link.instanceId,
    url: link.url,
    link_id: link.linkId,
    connected_at: at,
    seen_at: at,
  };
  await db
    .insertInto('reach_links')
    .values(row)
    .onConflict((oc) => oc.column('provider_id').doUpdateSet(row))
    .execute();
}

/** Refreshes `seen_at` of the connections this instance holds. */
export async function touchReachLinks(db: Kysely<BillingDB>, linkIds: string[], at: Date): Promise<void> {
  if (linkIds.length === 0) return;
  await db.updateTable('reach_links').set({ seen_at: at }).where('link_id', 'in', linkIds).execute();
}

/** Forgets the connection (only that one: a newer connection of the machine, at any instance, stays). */
export async function releaseReachLink(db: Kysely<BillingDB>, linkId: string): Promise<void> {
  await db.deleteFrom('reach_links').where('link_id', '=', linkId).execute();
}

/** Where the machine's connection is held, if anywhere seen since `freshAfter`. */
export async function findReachLink(
  db: Kysely<BillingDB>,
  providerId: string,
  freshAfter: Date,
): Promise<ReachLinkRow | null> {
  const row = await db
    .selectFrom('reach_links')
    .selectAll()
    .where('provider_id', '=', providerId)
    .where('seen_at', '>', freshAfter)
    .executeTakeFirst();
  return row ? { providerId: row.provider_id, instanceId: row.instance_id, url: row.url, linkId: row.link_id } : null;
}

/** Adds the bytes each session's streams carried since the last time (`[session ID, in, out]`). */
export async function addReachBytes(db: Kysely<BillingDB>, counts: [string, number, number][]): Promise<void> {
  if (counts.length === 0) return;
  const rows = sql.join(
    counts.map(([id, bytesIn, bytesOut]) => sql`(${id}::uuid, ${bytesIn}::bigint, ${bytesOut}::bigint)`),
  );
  await sql`
    UPDATE session_workloads AS w
    SET reach_bytes_in = w.reach_bytes_in + c.bytes_in, reach_bytes_out = w.reach_bytes_out + c.bytes_out
    FROM (VALUES ${rows}) AS c(session_id, bytes_in, bytes_out)
    WHERE w.session_id = c.session_id`.execute(db);
}

/** The platform's SSH host key: the one on record, else `made` (recorded; the first instance to record wins). */
export async function reachHostKey(db: Kysely<BillingDB>, made: () => string): Promise<string> {
  const found = await db.selectFrom('reach_host_key').select('private_key').where('id', '=', 1).executeTakeFirst();
  if (found) return found.private_key;
  await db
    .insertInto('reach_host_key')
    .values({ id: 1, private_key: made() })
    .onConflict((oc) => oc.column('id').doNothing())
    .execute();
  const row = await db.selectFrom('reach_host_key').select('private_key').where('id', '=', 1).executeTakeFirstOrThrow();
  return row.private_key;
}
