/** Zod schemas shared by the pricing and session routes. */
import { z } from 'zod';
import { schemas } from './schemas.ts';

/** The resource fields every priced request carries (contract "Billing defaults"). */
export const pricingInputShape = {
  gpu_model: z.string().min(1).max(200).describe('e.g. "NVIDIA GeForce RTX 4090"; unknown models use `default`'),
  gpu_count: z.number().int().min(1).max(64).default(1),
  requested_vram_mb: z.number().int().min(0).max(10_000_000).default(0).describe('VRAM in MB (1 GB = 1024 MB)'),
  estimated_power_w: z.number().int().min(0).max(100_000).default(0),
  provider_id: z.uuid().optional().describe("price with this provider's rates"),
};

/** The hourly rate broken down (all exact decimal strings). */
export const ratesSchema = z.object({
  gpu_model: z.string().describe('normalised model name'),
  rate_key: z.string().describe('the rate table entry used (`default` for unknown models)'),
  rate_source: z.enum(['platform', 'provider', 'bid']).describe('`bid`: an interruptible session at its bid'),
  provider_id: z.uuid().nullable(),
  gpu_count: z.number().int(),
  requested_vram_mb: z.number().int(),
  estimated_power_w: z.number().int(),
  base_rate_per_gpu: z.string(),
  base_hourly_rate: z.string().describe('base_rate_per_gpu × gpu_count'),
  vram_hourly_rate: z.string(),
  power_hourly_rate: z.string(),
  demand_multiplier: z.string(),
  supply_factor: z.string(),
  total_hourly_rate: z.string(),
  platform_fee_percent: z.string(),
});

/** A rental session. */
export const sessionSchema = z
  .object({
    id: z.uuid(),
    user_id: z.uuid(),
    wallet_id: z.uuid(),
    provider_id: z.uuid(),
    provider_wallet_id: z.uuid(),
    job_id: z.string(),
    gpu_model: z.string(),
    gpu_count: z.number().int(),
    gpu_indices: z
      .array(z.number().int())
      .nullable()
      .describe(
        "the machine's GPUs the session rents, by their index in the registry's record of the machine (what its " +
          'daemon reports usage for); null: a session without a registry, or one that rented the whole machine',
      ),
    requested_vram_mb: z.number().int(),
    estimated_power_w: z.number().int(),
    actual_power_w: z.string().nullable().describe('power draw of the latest usage update (W)'),
    rates: ratesSchema
      .omit({ gpu_model: true, provider_id: true, gpu_count: true, requested_vram_mb: true, estimated_power_w: true })
      .describe('frozen when the session started'),
    status: z.enum(['active', 'grace_period', 'completed', 'terminated']),
    hold_id: z.uuid(),
    lock_transaction_id: z.uuid().nullable(),
    billed_minutes: z.number().int(),
    total_cost: z.string(),
    started_at: z.string(),
    last_usage_at: z.string().nullable(),
    grace_until: z.string().nullable(),
    spend_cap: z
      .string()
      .nullable()
      .describe('the most the session may cost in all; it ends (`spend_cap`) once its cost reaches it; null: no cap'),
    spend_cap_ends_at: z
      .string()
      .nullable()
      .describe(
        'when the time the spend cap pays for is over (the cap at the frozen rate, from `started_at`): billing ends ' +
          'the session then, billed exactly the cap, within `billing.spend_cap_check_interval` (5 s); null: no cap',
      ),
    low_balance_since: z
      .string()
      .nullable()
      .describe(
        "when the renter's funds left (the hold and the wallet's available balance) came to pay for less than " +
          '`billing.low_balance_warning` of running (the `session.low_balance` event); null: enough',
      ),
    ended_at: z.string().nullable(),
    end_reason: z
      .string()
      .nullable()
      .describe(
        'why it ended: billing ended it for `spend_cap` (its cap reached), `insufficient_funds` (grace over), ' +
          '`provider_offline`, `provider_maintenance`, `provider_error` or `provider_removed`; a party ended it: ' +
          '`ended` or the reason it gave; a workload ended it: `workload_exited`, `workload_max_runtime`, ' +
          '`workload_limit`, `workload_failed`, `workload_stopped`, or `workload_not_started` (it never ran, nothing ' +
          'billed; one that took GPUs back, its first minute); `preempted`: an interruptible session whose GPUs a higher bid or an on-demand start took ' +
          '(`preempted_by`); null while it runs',
      ),
    workload: z
      .boolean()
      .optional()
      .describe(
        'whether the session runs a workload (GET /billing/sessions/{id}/workload); absent in events recorded ' +
          'before workloads existed',
      ),
    billed_from: z
      .string()
      .nullable()
      .optional()
      .describe(
        "when billing's clock started: `started_at`, or for a workload session when its workload was reported " +
          'running (null until then: nothing is billed before), unless the session took GPUs back from ' +
          'interruptible sessions (then `started_at`)',
      ),
    bid: z
      .string()
      .nullable()
      .optional()
      .describe(
        "an interruptible session's bid per GPU-hour (a higher bid or an on-demand start may take its GPUs back); " +
          'null: on demand; absent in events recorded before bids existed',
      ),
    preempted_by: z
      .uuid()
      .nullable()
      .optional()
      .describe(
        "the session whose start took this one's GPUs (`end_reason: preempted`); null: not preempted; absent in " +
          'events recorded before bids existed',
      ),
    rate_segments: z
      .array(
        z.object({
          from_minute: z.int().describe("the first minute of the session's clock at this rate (0: its first)"),
          hourly_rate: z.string().describe('the total hourly rate from then'),
          bid: z.string().nullable().describe('the bid per GPU-hour then'),
        }),
      )
      .nullable()
      .optional()
      .describe(
        "the session's rates by minute once its bid changed (POST /billing/sessions/{id}/bid): each minute is billed " +
          'at the highest rate in force during it; null: one rate (`rates.total_hourly_rate`) throughout; absent in ' +
          'events recorded before bids could change',
      ),
    trace_context: z
      .object({ traceparent: z.string(), tracestate: z.string().optional() })
      .nullable()
      .optional()
      .describe(
        'the W3C trace context of the request that started the session (tracing on; null when it was off): the ' +
          "session's trace, which its provider daemon's usage and workload reports continue (docs/conventions.md); " +
          'absent in events recorded before it existed',
      ),
  })
  .register(schemas, { id: 'Session' });

/** A billing record (one per ended session). */
export const billingRecordSchema = z
  .object({
    id: z.uuid(),
    session_id: z.uuid(),
    user_id: z.uuid(),
    wallet_id: z.uuid(),
    provider_id: z.uuid(),
    provider_wallet_id: z.uuid(),
    job_id: z.string(),
    gpu_model: z.string(),
    gpu_count: z.number().int(),
    status: z.enum(['completed', 'terminated']),
    end_reason: z.string().nullable(),
    total_hourly_rate: z.string(),
    billed_minutes: z.number().int(),
    total_cost: z.string(),
    platform_fee: z.string(),
    provider_earnings: z.string(),
    payment_transaction_id: z.uuid().nullable(),
    spend_cap: z.string().nullable().describe("the session's spend cap; null: none"),
    started_at: z.string(),
    ended_at: z.string(),
    created_at: z.string(),
  })
  .register(schemas, { id: 'BillingRecord' });
