/**
 * The wire shape of a provider, written once. `PROVIDER_FIELDS` lists the
 * fields of the API's Provider object in the order its JSON shows them; from
 * it are derived:
 * - `providerJson`, the presenter: a domain `Provider` to that JSON (the routes
 *   answer with it);
 * - the response schema (`routes/schemas.ts` `providerSchema`);
 * - discovery's SQL renderer (`db/provider-json-sql.ts`), which has PostgreSQL
 *   write the same JSON text for a page of providers (a measured win:
 *   docs/benchmarks.md).
 * A GPU's fields come from the GPU field list (`domain/gpu-fields.ts`) in the
 * same way. test/provider-json.test.ts holds the presenter and the SQL
 * renderer together. This module sits beside routes/ and db/ (neither's
 * layer), so the renderer in db/ can read the list without importing the
 * HTTP layer.
 */
import { GPU_FIELDS, type Gpu } from '../domain/gpu-fields.ts';
import type { Provider, ProviderStatus } from '../domain/provider.ts';

/**
 * How a field is written: `uuid` and `text` as JSON strings (`text` may be null), `status` the effective status,
 * `gpus` the array of GPUs in index order, `integer` a JSON number, `boolean` a JSON boolean, `timestamp` RFC 3339 UTC
 * with milliseconds, `object` a JSON object.
 */
export type ProviderFieldType = 'uuid' | 'text' | 'status' | 'gpus' | 'integer' | 'boolean' | 'timestamp' | 'object';

export interface ProviderField {
  readonly name: keyof Provider;
  readonly type: ProviderFieldType;
  /** May be null. */
  readonly nullable: boolean;
  /** For the API documentation. */
  readonly doc?: string;
}

export const PROVIDER_FIELDS = [
  { name: 'id', type: 'uuid', nullable: false },
  { name: 'owner_id', type: 'text', nullable: false },
  {
    name: 'daemon_client_id',
    type: 'text',
    nullable: true,
    doc:
      'the daemon client (its `client_id`) the machine is bound to: the one that registered it, claimed it or that ' +
      'its owner bound it to (PUT /providers/{providerID}/daemon); another daemon of the owner may not write it. ' +
      'null: none (the next daemon that attaches claims it)',
  },
  { name: 'name', type: 'text', nullable: false },
  { name: 'hostname', type: 'text', nullable: true },
  { name: 'ip_address', type: 'text', nullable: true },
  { name: 'status', type: 'status', nullable: false },
  { name: 'gpus', type: 'gpus', nullable: false },
  {
    name: 'min_gpus_per_rental',
    type: 'integer',
    nullable: false,
    doc: 'the smallest group of GPUs a rental may take on the machine (1-64)',
  },
  {
    name: 'held',
    type: 'boolean',
    nullable: false,
    doc:
      'held off the market by its owner: an explicit `busy` until an explicit `idle` (no offer lists it, a ' +
      'heartbeat or a session end leaves it busy, billing starts no rental on it)',
  },
  { name: 'location', type: 'text', nullable: true },
  {
    name: 'disk_mb',
    type: 'integer',
    nullable: true,
    doc:
      "the disk each workload on the machine gets, MB (its daemon's `workloads.disk_mb`: the work directory and /tmp " +
      'together); renters filter offers on it (`min_disk`). null: not stated',
  },
  { name: 'registered_at', type: 'timestamp', nullable: false, doc: 'RFC 3339 UTC' },
  {
    name: 'last_seen_at',
    type: 'timestamp',
    nullable: false,
    doc: 'RFC 3339 UTC; last heartbeat or status update',
  },
  { name: 'metadata', type: 'object', nullable: false },
] as const satisfies readonly ProviderField[];

/** Every field of a domain `Provider` is on the list (a compile error names the one left out). */
type Unlisted = Exclude<keyof Provider, (typeof PROVIDER_FIELDS)[number]['name']>;
const _everyFieldListed: [Unlisted] extends [never] ? true : Unlisted = true;
void _everyFieldListed;

/** A provider as the API shows it. */
export interface ProviderJson {
  id: string;
  owner_id: string;
  daemon_client_id: string | null;
  name: string;
  hostname: string | null;
  ip_address: string | null;
  status: ProviderStatus;
  gpus: Gpu[];
  min_gpus_per_rental: number;
  held: boolean;
  location: string | null;
  disk_mb: number | null;
  registered_at: string;
  last_seen_at: string;
  metadata: Record<string, unknown>;
}

/** A GPU as the API shows it: its fields in the GPU field list's order. */
function gpuJson(gpu: Gpu): Gpu {
  const json: Record<string, unknown> = {};
  for (const { name } of GPU_FIELDS) json[name] = gpu[name];
  return json as Gpu;
}

function fieldJson(field: ProviderField, provider: Provider): unknown {
  const value = provider[field.name];
  switch (field.type) {
    case 'timestamp':
      return (value as Date).toISOString();
    case 'gpus':
      return (value as Gpu[]).map(gpuJson);
    default:
      return value;
  }
}

/** The presenter: a provider as the API's JSON, its fields in `PROVIDER_FIELDS` order. */
export function providerJson(provider: Provider): ProviderJson {
  const json: Record<string, unknown> = {};
  for (const field of PROVIDER_FIELDS) json[field.name] = fieldJson(field, provider);
  return json as unknown as ProviderJson;
}
