/**
 * Request and response schemas of the provider endpoints: one zod schema
 * validates, types the handler and documents the field in OpenAPI. Integer
 * fields follow the spec's unsigned types (uint8/uint32/uint64, the last
 * bounded by JSON's exact integer range).
 */
import {
  type AppError,
  ignoringUnknownFields,
  isStorableJson,
  pageQuery,
  problemOf,
  problemSchema,
  queryInteger,
  schemaRegistry,
  statusOf,
} from '@gpu/common';
import { z } from 'zod';
import { SORTS } from '../domain/discovery.ts';
import {
  GPU_FIELDS,
  GPU_METRIC_FIELDS,
  type Gpu,
  type GpuField,
  type GpuInput,
  type GpuMetrics,
} from '../domain/gpu-fields.ts';
import { MIN_GPUS_PER_RENTAL, PROVIDER_STATUSES } from '../domain/provider.ts';
import type { StatusResult } from '../domain/registry-service.ts';
import type { Reliability } from '../domain/reliability.ts';
import {
  PROVIDER_FIELDS,
  type ProviderField,
  type ProviderFieldType,
  type ProviderJson,
} from '../wire/provider-json.ts';

/** The registry document's named schemas (`components.schemas`). */
export const schemas = schemaRegistry();

const UINT32_MAX = 4_294_967_295;
const uint32 = () => z.number().int().min(0).max(UINT32_MAX);
const uint64 = () => z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);
const percent = () => z.number().int().min(0).max(100);
/** The disk a workload gets, MB: PostgreSQL's `integer` holds it (up to about 2 PB). */
export const DISK_MB_MAX = 2_147_483_647;
/** Something but white space: the text a required field must hold (its document's `pattern`). */
const NOT_BLANK = /\S/;

/** Text with something but spaces in it: `max` characters as sent, stored trimmed (the documents state both). */
export const text = (max: number) => z.string().min(1).max(max).regex(NOT_BLANK, 'must not be blank').trim();
/** Text as sent, at most `max` characters, stored trimmed; may be empty or null. */
const optionalText = (max: number) => z.string().max(max).trim().nullish();

const statusSchema = z.enum(PROVIDER_STATUSES).describe('provider status');

/**
 * The validator of a GPU field's value (bounds and lengths from the GPU field list). Required text must not be
 * blank; optional text may be empty.
 */
function fieldValue(field: GpuField): z.ZodType {
  switch (field.type) {
    case 'text':
      return field.nullable
        ? z
            .string()
            .max(field.maxLength ?? 256)
            .trim()
        : text(field.maxLength ?? 256);
    case 'uint8':
      return z.number().int().min(0).max(255);
    case 'percent':
      return percent();
    case 'uint32':
      return uint32();
    case 'uint64':
      return uint64();
    case 'bool':
      return z.boolean();
  }
}

const described = <T extends z.ZodType>(schema: T, field: GpuField): T =>
  field.doc ? schema.describe(field.doc) : schema;

/** The zod shape of `fields`, each made from its field by `make`. */
const shapeOf = <F extends GpuField>(fields: readonly F[], make: (field: F) => z.ZodType) =>
  Object.fromEntries(fields.map((f) => [f.name, described(make(f), f)])) as Record<F['name'], z.ZodType>;

/**
 * A GPU in a registration or full update: the nullable fields may be null or left out, a field with a default
 * (`is_healthy`) may be left out, the others are required. (The casts give the derived schemas the field list's
 * derived types.)
 */
const gpuSchema = z
  .object(
    shapeOf(GPU_FIELDS, (f) => {
      if ('default' in f) return fieldValue(f).default(f.default);
      return f.nullable ? fieldValue(f).nullish() : fieldValue(f);
    }),
  )
  .describe('one GPU of a provider') as unknown as z.ZodType<GpuInput>;

/** A GPU as the API shows it: every field, null where the field is nullable and unknown. */
const gpuOutputSchema = z
  .object(shapeOf(GPU_FIELDS, (f) => (f.nullable ? fieldValue(f).nullable() : fieldValue(f))))
  .describe('One GPU of a provider')
  .register(schemas, { id: 'Gpu' }) as unknown as z.ZodType<Gpu>;

const hostnameSchema = z
  .string()
  .max(253)
  .regex(/^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$/, 'expected a hostname')
  .nullish();

/** How deep a machine's `metadata` may nest (objects and arrays, its own level the first). */
const MAX_METADATA_DEPTH = 16;

const metadataSchema = z
  .record(z.string().max(128), z.unknown())
  .refine((m) => Object.keys(m).length <= 64, 'at most 64 keys')
  .refine(
    (m) => isStorableJson(m, MAX_METADATA_DEPTH),
    `metadata may nest at most ${MAX_METADATA_DEPTH} levels and contain no NUL characters`,
  )
  .describe(
    `extra key-value data, stored as given (at most 64 keys, ${MAX_METADATA_DEPTH} levels deep; no NUL characters)`,
  );

/** The writable fields of a provider: a registration's, and a full update's. */
const providerInputShape = {
  owner_id: text(128).describe('identifier of the owning user'),
  name: text(128).describe('friendly name; unique per owner'),
  hostname: hostnameSchema,
  // `type` for the document: a union of formats says only `anyOf`, which leaves the field untyped for generators.
  ip_address: z
    .union([z.ipv4().max(15), z.ipv6().max(45)])
    .nullish()
    .meta({ type: ['string', 'null'], maxLength: 45, description: 'IPv4 or IPv6 address' }),
  location: optionalText(256),
  disk_mb: z
    .number()
    .int()
    .min(0)
    .max(DISK_MB_MAX)
    .nullish()
    .describe(
      'the disk each workload on the machine gets, MB (the work directory and /tmp together), as its daemon allows ' +
        'it; renters filter offers on it. Absent: none on registration, the stored one kept on a full update; null: ' +
        'not stated',
    ),
  metadata: metadataSchema.optional(),
  status: statusSchema.optional().describe('initial status (default idle; busy: held off the market by its owner)'),
  gpus: z.array(gpuSchema).min(1).max(64),
  min_gpus_per_rental: z
    .number()
    .int()
    .min(MIN_GPUS_PER_RENTAL.min)
    .max(MIN_GPUS_PER_RENTAL.max)
    .optional()
    .describe(
      'the smallest group of GPUs a rental may take on the machine (1 on registration when absent; a full update ' +
        'without it keeps the stored one); a machine whose GPU groups all have fewer free GPUs is off the market',
    ),
};

/** POST body: RegisterProviderRequest. */
export const providerInputSchema = z
  .object(providerInputShape)
  .describe('A new provider with its GPUs')
  .register(schemas, { id: 'RegisterProviderRequest' });

/** PUT body: a Provider; read-only fields (`registered_at`, `last_seen_at`) are ignored, `id` must match. */
export const providerUpdateSchema = z
  .object({
    ...providerInputShape,
    id: z.uuid().optional(),
    status: statusSchema.optional().describe('new status; unchanged when absent'),
    // A Provider as GET answers it can be sent back changed: its read-only fields are known, and ignored.
    registered_at: z.string().max(64).optional().describe('read-only: ignored'),
    last_seen_at: z.string().max(64).optional().describe('read-only: ignored'),
    held: z.boolean().optional().describe('read-only: ignored (`status` busy holds the machine, idle releases it)'),
    daemon_client_id: z
      .string()
      .max(128)
      .nullish()
      .describe('read-only: ignored (PUT /providers/{providerID}/daemon binds the machine)'),
  })
  .describe('Every writable field of a provider, its GPUs included (a Provider as GET answers it may be sent back)')
  .register(schemas, { id: 'UpdateProviderRequest' });

/** The schema of a field of the wire shape's list. */
function providerFieldSchema(field: ProviderField): z.ZodType {
  const schemas: Record<ProviderFieldType, () => z.ZodType> = {
    uuid: () => z.uuid(),
    text: () => z.string(),
    status: () => statusSchema,
    gpus: () => z.array(gpuOutputSchema),
    integer: () => z.number().int(),
    boolean: () => z.boolean(),
    timestamp: () => z.string(),
    object: () => z.record(z.string(), z.unknown()),
  };
  const schema = field.nullable ? schemas[field.type]().nullable() : schemas[field.type]();
  return field.doc ? schema.describe(field.doc) : schema;
}

/** A Provider as the API shows it, from the wire shape's one field list (`wire/provider-json.ts`). */
export const providerSchema = z
  .object(
    Object.fromEntries(PROVIDER_FIELDS.map((f) => [f.name, providerFieldSchema(f)])) as Record<
      keyof ProviderJson,
      z.ZodType
    >,
  )
  .describe('A provider machine with its GPUs')
  .register(schemas, { id: 'Provider' }) as unknown as z.ZodType<ProviderJson>;

/** A page of discovery. */
export const providerListSchema = z
  .array(providerSchema)
  .describe('One page of providers; `X-Next-Cursor` names the next')
  .register(schemas, { id: 'ProviderList' });

export const providerIdParams = z.object({ providerID: z.uuid().describe('provider UUID') });

export const statusUpdateSchema = z.object({ status: statusSchema }).register(schemas, { id: 'UpdateStatusRequest' });

/** PUT /providers/{id}/daemon: the daemon client the machine is bound to. */
export const bindDaemonSchema = z
  .object({
    client_id: z
      .uuid()
      .nullable()
      .describe(
        "a daemon client's `client_id`, or null for none (not checked with auth: a client of another owner's writes " +
          'nothing here all the same, its owner not being the machine owner)',
      ),
  })
  .describe('The daemon client to bind the machine to')
  .register(schemas, { id: 'BindDaemonRequest' });

/** One GPU's metrics in a heartbeat: its index and any of the metric fields. */
const gpuMetricsSchema = z.object({
  index: z.number().int().min(0).max(63).describe("position of the GPU in the provider's `gpus` array"),
  ...shapeOf(GPU_METRIC_FIELDS, (f) => fieldValue(f).optional()),
}) as unknown as z.ZodType<GpuMetrics>;

/** A heartbeat's metrics: at most one entry per GPU; none when absent. */
const gpuMetricsList = () =>
  z
    .array(gpuMetricsSchema)
    .max(64)
    .refine((ms) => new Set(ms.map((m) => m.index)).size === ms.length, 'each GPU index at most once')
    .default([]);

/**
 * A heartbeat's body. Unknown fields (a metric a newer daemon reads) are dropped, not refused: a heartbeat refused
 * every interval would take the machine offline (docs/conventions.md).
 */
export const heartbeatSchema = ignoringUnknownFields(z.object({ gpu_metrics: gpuMetricsList() }))
  .nullish()
  .describe('A heartbeat, with the metrics of some GPUs; the body is optional (none: a heartbeat without metrics)')
  .register(schemas, { id: 'HeartbeatRequest' });

/** Most heartbeats in one POST /providers/heartbeats. */
export const MAX_HEARTBEATS_PER_REQUEST = 1000;

/** Heartbeats of several machines at once (a daemon or relay beating for many machines of one owner). */
export const heartbeatBatchSchema = z
  .object({
    heartbeats: z
      .array(
        ignoringUnknownFields(
          z.object({
            provider_id: z.uuid(),
            gpu_metrics: gpuMetricsList(),
          }),
        ),
      )
      .min(1)
      .max(MAX_HEARTBEATS_PER_REQUEST),
  })
  .register(schemas, { id: 'HeartbeatBatch' });

/** Success message of PATCH status and heartbeat. */
export const statusResultSchema = z
  .object({
    message: z.string(),
    id: z.uuid(),
    previous_status: statusSchema,
    status: statusSchema,
    last_seen_at: z.string(),
  })
  .describe("A provider's status before and after a status update or a heartbeat")
  .register(schemas, { id: 'StatusResult' });

/** The answer of POST /providers/heartbeats: one result per heartbeat, in order. */
export const heartbeatBatchResultSchema = z
  .object({
    results: z.array(
      z.union([
        statusResultSchema.extend({ status_code: z.literal(200) }),
        z.object({ status_code: z.number().int(), problem: problemSchema }),
      ]),
    ),
  })
  .register(schemas, { id: 'HeartbeatBatchResult' });

/** The answer of a status write: the domain's result as the wire's snake_case JSON. */
export function statusResultJson(message: string, r: StatusResult): z.input<typeof statusResultSchema> {
  return {
    message,
    id: r.id,
    previous_status: r.previousStatus,
    status: r.status,
    last_seen_at: isoString(r.lastSeenAt),
  };
}

let lastIso: { ms: number; text: string } | undefined;

/**
 * `at` in ISO 8601, remembering the last: a batch of heartbeats shares its statement's clock, and each of its answers
 * would otherwise format the same instant again.
 */
function isoString(at: Date): string {
  const ms = at.getTime();
  if (lastIso?.ms !== ms) lastIso = { ms, text: at.toISOString() };
  return lastIso.text;
}

/**
 * One heartbeat's answer, the same in a batch's results (POST /providers/heartbeats) and as a NATS reply: 200 with
 * the status before and after, or its problem's status and body.
 */
export function heartbeatAnswered(r: StatusResult) {
  return { status_code: 200 as const, ...statusResultJson('heartbeat received', r) };
}
export function heartbeatRefused(err: AppError, extra: { request_id?: string } = {}) {
  return { status_code: statusOf(err), problem: { ...problemOf(err), ...extra } };
}

/** A machine's reliability (domain/reliability.ts). */
export const reliabilitySchema = z
  .object({
    provider_id: z.uuid(),
    score: z
      .number()
      .min(0)
      .max(1)
      .describe('uptime × session success, each 1 while unobserved: what offers sort and filter by'),
    uptime_30d: z
      .number()
      .min(0)
      .max(1)
      .nullable()
      .describe(
        'time up (idle, busy) over time up and down (offline, error) in the last 30 days; maintenance is neither',
      ),
    observed_hours_30d: z.number().min(0).describe('hours up or down in the last 30 days: what backs uptime_30d'),
    sessions_ended: z.number().int().min(0).describe('rental sessions that ended on the machine'),
    sessions_failed: z
      .number()
      .int()
      .min(0)
      .describe('those that ended by its fault: it went offline, into error or maintenance, or was removed'),
    session_success: z
      .number()
      .min(0)
      .max(1)
      .nullable()
      .describe('(sessions_ended - sessions_failed) / sessions_ended; null without an ended session'),
  })
  .describe("A machine's reliability, from its status history and its rentals' ends")
  .register(schemas, { id: 'Reliability' });

/** The answer of GET /providers/{id}/reliability. */
export function reliabilityJson(providerId: string, r: Reliability): z.input<typeof reliabilitySchema> {
  return {
    provider_id: providerId,
    score: r.score,
    uptime_30d: r.uptime,
    observed_hours_30d: (r.upSeconds + r.downSeconds) / 3600,
    sessions_ended: r.sessionsEnded,
    sessions_failed: r.sessionsFailed,
    session_success: r.sessionSuccess,
  };
}

export const messageSchema = z
  .object({ message: z.string(), id: z.uuid() })
  .describe('The deleted provider')
  .register(schemas, { id: 'ProviderDeleted' });

export const listQuerySchema = z.object({
  status: statusSchema.optional(),
  gpu_model: text(128).optional().describe('partial GPU model match, ASCII letters in either case'),
  min_vram: queryInteger(0, Number.MAX_SAFE_INTEGER).optional().describe('minimum VRAM of a GPU in MB'),
  architecture: text(64).optional().describe('GPU architecture, ASCII letters in either case'),
  healthy_only: z
    .enum(['true', 'false', '1', '0'])
    .transform((v) => v === 'true' || v === '1')
    .optional()
    .describe('only providers whose GPUs are all healthy'),
  min_gpus: queryInteger(1, 64).optional().describe('at least this many GPUs meeting the GPU conditions'),
  sort: z.enum(SORTS).default('registered_at').describe('sort key, `-` for descending; ties by id'),
  ...pageQuery,
});
