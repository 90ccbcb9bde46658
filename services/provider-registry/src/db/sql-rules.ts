/**
 * The domain's status rules as SQL fragments, so reads, filters, heartbeats
 * and the offline sweep apply them atomically in the database, with the
 * database's clock (one clock for every registry instance).
 */
import { type RawBuilder, sql } from 'kysely';
import { AUTO_OFFLINE_FROM, type ProviderStatus, REVIVED_BY_HEARTBEAT } from '../domain/provider.ts';

const list = (xs: readonly string[]) =>
  sql.join(
    xs.map((x) => sql.lit(x)),
    sql`, `,
  );

/** `now() - offline bound`. */
export const staleBefore = (offlineAfterMs: number) => sql`(now() - ${offlineAfterMs} * interval '1 millisecond')`;

/** The status shown to readers: `offline` once a provider in an auto-offline state is silent past the bound. */
export function effectiveStatusSql(offlineAfterMs: number): RawBuilder<ProviderStatus> {
  return sql<ProviderStatus>`(CASE WHEN p.status IN (${list(AUTO_OFFLINE_FROM)}) AND p.last_seen_at < ${staleBefore(offlineAfterMs)} THEN 'offline' ELSE p.status END)`;
}

/** A WHERE condition: the provider's effective status is `status`. */
export function effectiveStatusIs(status: ProviderStatus, offlineAfterMs: number): RawBuilder<boolean> {
  if (status === 'offline') {
    return sql<boolean>`(p.status = 'offline' OR (p.status IN (${list(AUTO_OFFLINE_FROM)}) AND p.last_seen_at < ${staleBefore(offlineAfterMs)}))`;
  }
  if (AUTO_OFFLINE_FROM.includes(status)) {
    return sql<boolean>`(p.status = ${status} AND p.last_seen_at >= ${staleBefore(offlineAfterMs)})`;
  }
  return sql<boolean>`(p.status = ${status})`;
}

/** The status after a heartbeat, given the locked current row `cur`. */
export const statusAfterHeartbeatSql = sql<ProviderStatus>`(CASE WHEN cur.status IN (${list(REVIVED_BY_HEARTBEAT)}) THEN 'idle' ELSE cur.status END)`;

/** A WHERE condition on the provider row `p`: stored in an auto-offline state and silent past the bound. */
export const isStale = (offlineAfterMs: number) =>
  sql<boolean>`(p.status IN (${list(AUTO_OFFLINE_FROM)}) AND p.last_seen_at < ${staleBefore(offlineAfterMs)})`;
