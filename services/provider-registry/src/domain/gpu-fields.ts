/**
 * The one list of a GPU's fields. Everything that names them is derived from
 * it: the domain types below, the request and response schemas
 * (`routes/schemas.ts`), the table type and column lists (`db/schema.ts`,
 * `db/provider-repository.ts`), the row mapping (`db/provider-mapper.ts`), the
 * heartbeat's metric write (`db/status-repository.ts`), the presenter
 * (`wire/provider-json.ts`) and discovery's JSON rendering
 * (`db/provider-json-sql.ts`).
 *
 * A field is either part of the GPU's static description (`spec`: written by
 * registration and full update) or a live metric (`metric`: also written by
 * heartbeats, addressed by the GPU's index). The order is the order of the
 * API's JSON.
 *
 * Adding a field takes a migration (migrations are frozen and never read this
 * list): its column, and for a `spec` field a new version of the trigger that
 * keeps `gpus.spec_json` (migration `20250103000000_gpu_spec_json`), whose text
 * discovery sends as the opening of each GPU's JSON.
 */

/**
 * What a field holds: text (with a maximum length), an unsigned integer of the spec's width (`uint64` bounded by
 * JSON's exact integer range), a percentage (0-100) or a boolean.
 */
export type GpuFieldType = 'text' | 'uint8' | 'percent' | 'uint32' | 'uint64' | 'bool';

export interface GpuField {
  readonly name: string;
  readonly type: GpuFieldType;
  /** May be null (and may be left out when written). */
  readonly nullable: boolean;
  readonly group: 'spec' | 'metric';
  /** Longest text, for `text` fields. */
  readonly maxLength?: number;
  /** The value of a field that is not nullable but may be left out when written. */
  readonly default?: boolean;
  /** For the API documentation. */
  readonly doc?: string;
}

export const GPU_FIELDS = [
  {
    name: 'model_name',
    type: 'text',
    maxLength: 128,
    nullable: false,
    group: 'spec',
    doc: 'GPU model name, e.g. "NVIDIA A100-SXM4-80GB"',
  },
  { name: 'vram', type: 'uint64', nullable: false, group: 'spec', doc: 'video memory in MB' },
  { name: 'driver_version', type: 'text', maxLength: 64, nullable: false, group: 'spec' },
  {
    name: 'architecture',
    type: 'text',
    maxLength: 64,
    nullable: true,
    group: 'spec',
    doc: 'architecture name, e.g. "ampere"',
  },
  { name: 'compute_capability', type: 'text', maxLength: 16, nullable: true, group: 'spec', doc: 'e.g. "8.0"' },
  { name: 'cuda_cores', type: 'uint32', nullable: true, group: 'spec' },
  { name: 'tensor_cores', type: 'uint32', nullable: true, group: 'spec' },
  { name: 'memory_bandwidth', type: 'uint64', nullable: true, group: 'spec', doc: 'GB/s' },
  { name: 'power_consumption', type: 'uint32', nullable: true, group: 'spec', doc: 'maximum power in watts' },
  { name: 'utilization_gpu', type: 'percent', nullable: true, group: 'metric', doc: 'core utilization, 0-100 percent' },
  {
    name: 'utilization_mem',
    type: 'percent',
    nullable: true,
    group: 'metric',
    doc: 'memory utilization, 0-100 percent',
  },
  { name: 'temperature', type: 'uint8', nullable: true, group: 'metric', doc: 'Celsius (uint8)' },
  { name: 'power_draw', type: 'uint32', nullable: true, group: 'metric', doc: 'current power draw in watts' },
  { name: 'is_healthy', type: 'bool', nullable: false, group: 'metric', default: true },
] as const satisfies readonly GpuField[];

type Fields = (typeof GPU_FIELDS)[number];

/** The JavaScript value of a field type. */
type GpuFieldValue<T extends GpuFieldType> = T extends 'text' ? string : T extends 'bool' ? boolean : number;

type ValueOf<F extends GpuField> = GpuFieldValue<F['type']> | (F['nullable'] extends true ? null : never);

/** Static description and current metrics of one GPU, as the API shows it. */
export type Gpu = { [F in Fields as F['name']]: ValueOf<F> };

type RequiredName = Extract<Fields, { nullable: false }>['name'];

/** A GPU as written by registration or full update (defaults applied): the nullable fields may be left out. */
export type GpuInput = Pick<Gpu, RequiredName> & Partial<Omit<Gpu, RequiredName>>;

type GpuMetricName = Extract<Fields, { group: 'metric' }>['name'];

/** Metrics a heartbeat reports for the GPU at `index` (its position in the provider's `gpus`); omitted ones are kept. */
export type GpuMetrics = { index: number } & { [K in GpuMetricName]?: Exclude<Gpu[K], null> };

/** The static fields, in order (what `gpus.spec_json` renders). */
export const GPU_SPEC_FIELDS = GPU_FIELDS.filter((f) => f.group === 'spec');

/** The live metrics, in order. */
export const GPU_METRIC_FIELDS = GPU_FIELDS.filter(
  (f): f is Extract<Fields, { group: 'metric' }> => f.group === 'metric',
);
