/**
 * Status events written by the statement that changes the status: the
 * statement becomes
 *
 *   WITH changed AS (<statement>),
 *        recorded AS (INSERT INTO outbox_events ... SELECT ... FROM changed WHERE the status changed)
 *   SELECT * FROM changed
 *
 * so an event commits with its change, in the same round trip, and a
 * heartbeat that changes nothing inserts nothing. The body is the outbox's
 * envelope and the change (`domain/status-events.ts`), built by PostgreSQL:
 * `occurred_at` is the statement's transaction time, as `registered_at` and
 * `last_seen_at` are.
 */
import { type OperationNodeSource, type RawBuilder, sql } from 'kysely';
import { type EventRecording, eventKindOf } from '../domain/status-events.ts';

/** The correlation ID of the changed row `c`. */
function correlationOf(correlation: EventRecording['correlation']): RawBuilder<string | null> {
  if (correlation === undefined) return sql`NULL::text`;
  if (typeof correlation === 'string') return sql`${correlation}::text`;
  const ids = [...correlation.keys()];
  const values = ids.map((id) => correlation.get(id) ?? null);
  return sql`(SELECT b.corr FROM unnest(${ids}::uuid[], ${values}::text[]) AS b(id, corr) WHERE b.id = c.id)`;
}

/**
 * `statement` with the status events of the rows it changed recorded in the outbox. The statement returns (at
 * least) `id`, `owner_id`, `previous_status` (null for a new provider) and `status` (null for a removed one: the
 * `removed` recording makes `provider.removed` events); the result is its rows. `ctes`: common table expressions
 * (`name AS (...), ...`) the statement reads, written before it (a data-modifying one must be at the top level).
 * Without a recording (events off) the statement is sent as it is, after its `ctes`.
 */
export function withStatusEvents<R>(
  statement: OperationNodeSource,
  recording: EventRecording | undefined,
  ctes?: RawBuilder<unknown>,
): RawBuilder<R> {
  if (!recording) return ctes ? sql<R>`WITH ${ctes} ${statement}` : sql<R>`${statement}`;
  const kind = sql.lit(eventKindOf(recording.reason));
  // The subquery that draws the event ID is not flattened (PostgreSQL keeps a subquery with a volatile target
  // list), so `event_id` in the body and the row's ID are one value.
  return sql<R>`
    WITH ${ctes ? sql`${ctes},` : sql``} changed AS (${statement}),
    recorded AS (
      INSERT INTO outbox_events (id, kind, payload, correlation_id, trace_context)
      SELECT e.event_id, ${kind}, jsonb_build_object(
        'event_id', e.event_id,
        'kind', ${kind},
        'occurred_at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'type', ${kind},
        'provider_id', e.id,
        'owner_id', e.owner_id,
        'previous_status', e.previous_status,
        'status', e.status,
        'reason', ${sql.lit(recording.reason)}::text
      ), e.correlation_id, ${recording.trace ?? null}::jsonb
      FROM (
        SELECT gen_random_uuid() AS event_id, c.id, c.owner_id, c.previous_status, c.status,
          ${correlationOf(recording.correlation)} AS correlation_id
        FROM changed c WHERE c.previous_status IS DISTINCT FROM c.status
      ) e
    )
    SELECT * FROM changed`;
}
