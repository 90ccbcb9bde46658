/**
 * A provider row `p` as the API's JSON text, rendered by PostgreSQL, for the
 * discovery list.
 *
 * Why in SQL: a page of 100 providers carries ~400 GPU rows. Fetching them as
 * rows cost the service more CPU than the query itself (the driver turns every
 * field of every row into a JS value, then the page is serialized again), and
 * the service is one thread while the database spreads requests over cores.
 * Rendered here, the service only joins ready-made objects into an array.
 *
 * The fields, their order and how each is written come from the wire shape's
 * one list (`wire/provider-json.ts` `PROVIDER_FIELDS`, and the GPU field list
 * for each GPU), so the text is byte for byte what the presenter
 * (`providerJson`) + `JSON.stringify` produce for the same row (key order,
 * `null`s, millisecond UTC timestamps), except that `metadata` is jsonb's own
 * text (same JSON value, spaces after `:` and `,`). `concat()` builds each
 * object in one call; `to_json` escapes every string.
 * test/provider-json.test.ts and test/discovery-rendering.test.ts hold the two
 * serializations together.
 */
import { type RawBuilder, sql } from 'kysely';
import { GPU_METRIC_FIELDS, type GpuField } from '../domain/gpu-fields.ts';
import { PROVIDER_FIELDS, type ProviderField } from '../wire/provider-json.ts';
import { effectiveStatusSql } from './sql-rules.ts';

type JsonText = RawBuilder<string>;

/** A JSON string or `null` (to_json escapes quotes, backslashes and control characters). */
const jsonString = (column: string): JsonText => sql<string>`coalesce(to_json(${sql.ref(column)})::text, 'null')`;

/** A JSON number or boolean, or `null` (integer and boolean columns print as JSON literals). */
const jsonLiteral = (column: string): JsonText => sql<string>`coalesce(${sql.ref(column)}::text, 'null')`;

/** An RFC 3339 UTC timestamp with milliseconds, as `Date.prototype.toISOString` writes it. */
const jsonTimestamp = (column: string): JsonText =>
  sql<string>`concat('"', to_char(${sql.ref(column)} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), '"')`;

/** `{"key":value,...}` from JSON-text fragments, keys in the order given. */
function jsonObject(fields: Record<string, JsonText>): JsonText {
  const parts = Object.entries(fields).flatMap(([key, value], i) => [
    sql.lit(`${i === 0 ? '{' : ','}${JSON.stringify(key)}:`),
    value,
  ]);
  return sql<string>`concat(${sql.join([...parts, sql.lit('}')])})`;
}

/** A GPU field of `g` as JSON text: strings escaped, numbers and booleans as their literals. */
const gpuFieldJson = (field: GpuField): JsonText =>
  field.type === 'text' ? jsonString(`g.${field.name}`) : jsonLiteral(`g.${field.name}`);

/**
 * A GPU `g` as JSON text: the opening `gpus.spec_json` holds with the static fields already rendered (a trigger
 * keeps it; see its migration), then the live metrics, which heartbeats write, rendered on each read.
 */
const gpuJson = sql<string>`concat(g.spec_json, ${sql.join(
  GPU_METRIC_FIELDS.flatMap((f) => [sql.lit(`,${JSON.stringify(f.name)}:`), gpuFieldJson(f)]),
)}, '}')`;

/** The JSON array of `p`'s GPUs in index order. */
const gpusJson = sql<string>`concat('[', (
  SELECT string_agg(${gpuJson}, ',' ORDER BY g.idx) FROM gpus g WHERE g.provider_id = p.id
), ']')`;

/** A provider field of the row `p` as JSON text (its column is the field's name). */
function providerFieldJson(field: ProviderField, offlineAfterMs: number): JsonText {
  const column = `p.${field.name}`;
  switch (field.type) {
    case 'uuid':
      return sql<string>`concat('"', ${sql.ref(column)}, '"')`;
    case 'text':
      return jsonString(column);
    case 'status':
      return sql<string>`to_json(${effectiveStatusSql(offlineAfterMs)})::text`;
    case 'gpus':
      return gpusJson;
    case 'integer':
    case 'boolean':
      return jsonLiteral(column);
    case 'timestamp':
      return jsonTimestamp(column);
    case 'object':
      return sql<string>`${sql.ref(column)}::text`;
  }
}

/** The API's Provider object for the row `p`, with its effective status, as JSON text. */
export function providerJsonSql(offlineAfterMs: number): JsonText {
  return jsonObject(
    Object.fromEntries(PROVIDER_FIELDS.map((field) => [field.name, providerFieldJson(field, offlineAfterMs)])),
  );
}
