/**
 * Request and response schemas of the provider endpoints: one zod schema
 * validates, types the handler and documents the field in OpenAPI. Integer
 * fields follow the spec's unsigned types (uint8/uint32/uint64, the last
 * bounded by JSON's exact integer range).
 */
import { z } from 'zod';
import { DEFAULT_LIMIT, MAX_LIMIT, SORTS } from '../domain/discovery.ts';
import { PROVIDER_STATUSES } from '../domain/provider.ts';

const UINT32_MAX = 4_294_967_295;
const uint32 = () => z.number().int().min(0).max(UINT32_MAX);
const uint64 = () => z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);
const percent = () => z.number().int().min(0).max(100);
const text = (max: number) => z.string().trim().min(1).max(max);
const optionalText = (max: number) => z.string().trim().max(max).nullish();

export const statusSchema = z.enum(PROVIDER_STATUSES).describe('provider status');

export const gpuSchema = z
  .object({
    model_name: text(128).describe('GPU model name, e.g. "NVIDIA A100-SXM4-80GB"'),
    vram: uint64().describe('video memory in MB'),
    driver_version: text(64),
    architecture: optionalText(64).describe('architecture name, e.g. "ampere"'),
    compute_capability: optionalText(16).describe('e.g. "8.0"'),
    cuda_cores: uint32().nullish(),
    tensor_cores: uint32().nullish(),
    memory_bandwidth: uint64().nullish().describe('GB/s'),
    power_consumption: uint32().nullish().describe('maximum power in watts'),
    utilization_gpu: percent().nullish().describe('core utilization, 0-100 percent'),
    utilization_mem: percent().nullish().describe('memory utilization, 0-100 percent'),
    temperature: z.number().int().min(0).max(255).nullish().describe('Celsius (uint8)'),
    power_draw: uint32().nullish().describe('current power draw in watts'),
    is_healthy: z.boolean().default(true),
  })
  .describe('one GPU of a provider');

const hostnameSchema = z
  .string()
  .trim()
  .max(253)
  .regex(/^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$/, 'expected a hostname')
  .nullish();

const metadataSchema = z
  .record(z.string().max(128), z.unknown())
  .refine((m) => Object.keys(m).length <= 64, 'at most 64 keys')
  .describe('extra key-value data');

/** RegisterProviderRequest, and the writable fields of a full update. */
export const providerInputSchema = z.object({
  owner_id: text(128).describe('identifier of the owning user'),
  name: text(128).describe('friendly name; unique per owner'),
  hostname: hostnameSchema,
  ip_address: z.union([z.ipv4(), z.ipv6()]).nullish(),
  location: optionalText(256),
  metadata: metadataSchema.optional(),
  status: statusSchema.optional().describe('initial status (default idle)'),
  gpus: z.array(gpuSchema).min(1).max(64),
});

/** PUT body: a Provider; read-only fields (`registered_at`, `last_seen_at`) are ignored, `id` must match. */
export const providerUpdateSchema = providerInputSchema.extend({
  id: z.uuid().optional(),
  status: statusSchema.optional().describe('new status; unchanged when absent'),
});

export const providerSchema = z
  .object({
    id: z.uuid(),
    owner_id: z.string(),
    name: z.string(),
    hostname: z.string().nullable(),
    ip_address: z.string().nullable(),
    status: statusSchema,
    gpus: z.array(
      gpuSchema.extend({
        architecture: z.string().nullable(),
        compute_capability: z.string().nullable(),
        cuda_cores: z.number().nullable(),
        tensor_cores: z.number().nullable(),
        memory_bandwidth: z.number().nullable(),
        power_consumption: z.number().nullable(),
        utilization_gpu: z.number().nullable(),
        utilization_mem: z.number().nullable(),
        temperature: z.number().nullable(),
        power_draw: z.number().nullable(),
        is_healthy: z.boolean(),
      }),
    ),
    location: z.string().nullable(),
    registered_at: z.string().describe('RFC 3339 UTC'),
    last_seen_at: z.string().describe('RFC 3339 UTC; last heartbeat or status update'),
    metadata: z.record(z.string(), z.unknown()),
  })
  .describe('Provider');

export const providerIdParams = z.object({ providerID: z.uuid().describe('provider UUID') });

export const statusUpdateSchema = z.object({ status: statusSchema });

export const gpuMetricsSchema = z.object({
  index: z.number().int().min(0).max(63).describe("position of the GPU in the provider's `gpus` array"),
  utilization_gpu: percent().optional(),
  utilization_mem: percent().optional(),
  temperature: z.number().int().min(0).max(255).optional(),
  power_draw: uint32().optional(),
  is_healthy: z.boolean().optional(),
});

export const heartbeatSchema = z
  .object({
    gpu_metrics: z
      .array(gpuMetricsSchema)
      .max(64)
      .refine((ms) => new Set(ms.map((m) => m.index)).size === ms.length, 'each GPU index at most once')
      .default([]),
  })
  .nullish()
  .describe('HeartbeatRequest (optional body)');

/** Success message of PATCH status and heartbeat. */
export const statusResultSchema = z.object({
  message: z.string(),
  id: z.uuid(),
  previous_status: statusSchema,
  status: statusSchema,
  last_seen_at: z.string(),
});

export const messageSchema = z.object({ message: z.string(), id: z.uuid() });

const uintParam = (max: number) =>
  z
    .string()
    .regex(/^\d{1,16}$/, 'expected an unsigned integer')
    .transform(Number)
    .pipe(z.number().int().min(0).max(max));

export const listQuerySchema = z.object({
  status: statusSchema.optional(),
  gpu_model: z.string().trim().min(1).max(128).optional().describe('partial, case-insensitive GPU model match'),
  min_vram: uintParam(Number.MAX_SAFE_INTEGER).optional().describe('minimum VRAM of a GPU in MB'),
  architecture: z.string().trim().min(1).max(64).optional().describe('GPU architecture, case-insensitive'),
  healthy_only: z
    .enum(['true', 'false', '1', '0'])
    .transform((v) => v === 'true' || v === '1')
    .optional()
    .describe('only providers whose GPUs are all healthy'),
  min_gpus: uintParam(64)
    .pipe(z.number().min(1))
    .optional()
    .describe('at least this many GPUs meeting the GPU conditions'),
  sort: z.enum(SORTS).default('registered_at').describe('sort key, `-` for descending; ties by id'),
  limit: uintParam(MAX_LIMIT).pipe(z.number().min(1)).default(DEFAULT_LIMIT).describe(`page size, 1-${MAX_LIMIT}`),
  cursor: z.string().max(512).optional().describe('`X-Next-Cursor` of the previous page'),
});
