/**
 * The status rules of `domain/provider.ts` (the heartbeat rule, the states
 * that fall to offline when silent) rendered to SQL from its constants, so
 * reads, filters, heartbeats and the offline sweep apply them atomically in
 * the database, with the database's clock (one clock for every registry
 * instance). The rules are stated there; this file only translates them.
 */
import { type RawBuilder, sql } from 'kysely';
import {
  AUTO_OFFLINE_FROM,
  type ProviderStatus,
  RENTABLE_STATUS,
  RENTED_STATUS,
  REVIVED_BY_HEARTBEAT,
} from '../domain/provider.ts';

const list = (xs: readonly string[]) =>
  sql.join(
    xs.map((x) => sql.lit(x)),
    sql`, `,
  );

/** `now() - offline bound`. */
const staleBefore = (offlineAfterMs: number) => sql`(now() - ${offlineAfterMs} * interval '1 millisecond')`;

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

/**
 * Whether the locked current row `cur` is fully rented, the rental rule's condition (`domain/provider-sessions.ts`):
 * an active session runs on it, and none of its GPU groups (offers) has `min_gpus_per_rental` GPUs that are healthy
 * and held by no active session (`offers.unrented_gpus`, which the database keeps: the GPU leases migration).
 */
const fullyRentedSql = sql<boolean>`(EXISTS (SELECT 1 FROM provider_sessions s WHERE s.provider_id = cur.id AND s.active) AND NOT EXISTS (SELECT 1 FROM offers o WHERE o.provider_id = cur.id AND o.unrented_gpus >= o.min_gpus_per_rental))`;

/** `fullyRentedSql` for one provider, read on its own (under the caller's row lock). */
export const isFullyRentedSql = (id: string) =>
  sql<{ fully_rented: boolean }>`SELECT ${fullyRentedSql} AS fully_rented FROM providers cur WHERE cur.id = ${id}`;

/**
 * The status after a heartbeat (the heartbeat rule), given the locked current row `cur`: a revived provider that is
 * fully rented comes back `busy`. The session lookup runs only for a revival (CASE evaluates lazily).
 */
export const statusAfterHeartbeatSql = sql<ProviderStatus>`(CASE WHEN cur.status IN (${list(REVIVED_BY_HEARTBEAT)}) THEN (CASE WHEN ${fullyRentedSql} THEN ${sql.lit(RENTED_STATUS)} ELSE ${sql.lit(RENTABLE_STATUS)} END) ELSE cur.status END)`;

/**
 * The status after the rental rule, given the locked current row `cur`: `busy` when fully rented and `idle` when not,
 * for a provider in either; every other state kept.
 */
export const statusAfterRentalSql = sql<ProviderStatus>`(CASE WHEN cur.status IN (${list([RENTABLE_STATUS, RENTED_STATUS])}) THEN (CASE WHEN ${fullyRentedSql} THEN ${sql.lit(RENTED_STATUS)} ELSE ${sql.lit(RENTABLE_STATUS)} END) ELSE cur.status END)`;

/**
 * A WHERE condition on the provider row `p`: stored in `status`, an auto-offline state, and silent past the bound.
 * One state at a time, so that it is one range of the `(status, last_seen_at)` index.
 */
export function isStale(status: ProviderStatus, offlineAfterMs: number): RawBuilder<boolean> {
  if (!AUTO_OFFLINE_FROM.includes(status)) throw new Error(`${status} never falls to offline`);
  return sql<boolean>`(p.status = ${status} AND p.last_seen_at < ${staleBefore(offlineAfterMs)})`;
}
