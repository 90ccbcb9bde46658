/** Which instance holds each machine's relay connection (`reach_links`, migration 0026). */
import type { Kysely } from 'kysely';
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
