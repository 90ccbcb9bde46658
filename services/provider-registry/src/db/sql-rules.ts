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

/**
 * Where a rule reads a provider's status and clock: the clock is the narrow row's (`provider_liveness.last_seen_at`),
 * the status either the provider row's or the narrow row's copy, which the database keeps equal (the liveness
 * migration), so a statement names the one its index walks.
 */
export interface LivenessRefs {
  status: string;
  lastSeenAt: string;
}

/** A rendered row `p` carrying both (a page of discovery, a provider read with its clock). */
const ROW: LivenessRefs = { status: 'p.status', lastSeenAt: 'p.last_seen_at' };

/** The status shown to readers: `offline` once a provider in an auto-offline state is silent past the bound. */
export function effectiveStatusSql(offlineAfterMs: number, refs: LivenessRefs = ROW): RawBuilder<ProviderStatus> {
  const status = sql.ref(refs.status);
  return sql<ProviderStatus>`(CASE WHEN ${status} IN (${list(AUTO_OFFLINE_FROM)}) AND ${sql.ref(refs.lastSeenAt)} < ${staleBefore(offlineAfterMs)} THEN 'offline' ELSE ${status} END)`;
}

/** A WHERE condition: the provider's effective status is `status`. */
export function effectiveStatusIs(
  status: ProviderStatus,
  offlineAfterMs: number,
  refs: LivenessRefs,
): RawBuilder<boolean> {
  const stored = sql.ref(refs.status);
  const seen = sql.ref(refs.lastSeenAt);
  if (status === 'offline') {
    return sql<boolean>`(${stored} = 'offline' OR (${stored} IN (${list(AUTO_OFFLINE_FROM)}) AND ${seen} < ${staleBefore(offlineAfterMs)}))`;
  }
  if (AUTO_OFFLINE_FROM.includes(status)) {
    return sql<boolean>`(${stored} = ${status} AND ${seen} >= ${staleBefore(offlineAfterMs)})`;
  }
  return sql<boolean>`(${stored} = ${status})`;
}

/**
 * Whether the locked current row `cur` is fully rented, the rental rule's condition (`domain/gpu-holds.ts`): billing
 * holds some of its GPUs, and none of its GPU groups (offers) has `min_gpus_per_rental` GPUs that are healthy and not
 * held (`offers.unrented_gpus`, which the database keeps: `gpu_holds_offer_gpus` in definitions.ts).
 */
const fullyRentedSql = sql<boolean>`(EXISTS (SELECT 1 FROM gpu_holds h WHERE h.provider_id = cur.id AND cardinality(h.gpu_indices) > 0) AND NOT EXISTS (SELECT 1 FROM offers o WHERE o.provider_id = cur.id AND o.unrented_gpus >= o.min_gpus_per_rental))`;

/** `fullyRentedSql` for one provider, read on its own (under the caller's row lock). */
export const isFullyRentedSql = (id: string) =>
  sql<{ fully_rented: boolean }>`SELECT ${fullyRentedSql} AS fully_rented FROM providers cur WHERE cur.id = ${id}`;

/**
 * `busy` for the locked current row `cur` when its owner holds it or it is fully rented, else `idle`: what the rental
 * rule and a revival make of a machine. The hold is read first, so a held machine's sessions are not looked up (CASE
 * evaluates lazily).
 */
const rentableOrRentedSql = sql<ProviderStatus>`(CASE WHEN cur.held OR ${fullyRentedSql} THEN ${sql.lit(RENTED_STATUS)} ELSE ${sql.lit(RENTABLE_STATUS)} END)`;

/**
 * The status after a heartbeat (the heartbeat rule), given the locked current row `cur`: a revived provider that is
 * fully rented or held by its owner comes back `busy`. The session lookup runs only for a revival.
 */
export const statusAfterHeartbeatSql = sql<ProviderStatus>`(CASE WHEN cur.status IN (${list(REVIVED_BY_HEARTBEAT)}) THEN ${rentableOrRentedSql} ELSE cur.status END)`;

/**
 * The status after the rental rule, given the locked current row `cur`: for a provider in `idle` or `busy`, `busy`
 * when fully rented or held by its owner and `idle` when neither; every other state kept.
 */
export const statusAfterRentalSql = sql<ProviderStatus>`(CASE WHEN cur.status IN (${list([RENTABLE_STATUS, RENTED_STATUS])}) THEN ${rentableOrRentedSql} ELSE cur.status END)`;

/**
 * A WHERE condition on the narrow row `l` (`provider_liveness`): a heartbeat leaves its status as it is (the heartbeat
 * rule changes nothing), so it only moves the clock.
 */
export const keptByHeartbeatSql = sql<boolean>`(l.status NOT IN (${list(REVIVED_BY_HEARTBEAT)}))`;

/**
 * A WHERE condition on the narrow row `l`: stored in a state that falls to offline when silent (`AUTO_OFFLINE_FROM`),
 * and silent past the bound. Its clock is in no index (a heartbeat stays heap-only), so the offline sweep reads each
 * narrow row once for every state at a time.
 */
export function isSilent(offlineAfterMs: number): RawBuilder<boolean> {
  return sql<boolean>`(l.status IN (${list(AUTO_OFFLINE_FROM)}) AND l.last_seen_at < ${staleBefore(offlineAfterMs)})`;
}
