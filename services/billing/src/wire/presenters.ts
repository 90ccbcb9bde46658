/**
 * Presenters: domain values to the wire JSON (snake_case, amounts as decimal
 * strings at the token's scale, rates exact with at least the token's
 * decimals, times in RFC 3339 UTC). The routes answer with these, and the
 * events carry the same shapes (adapters/billing-events.ts), so they live
 * beside both rather than in routes/: an adapter never imports the HTTP layer.
 * The response schemas beside the routes describe them. They take the domain's values (its concepts' index.ts),
 * never the database's rows directly.
 */
import type { BillingState } from '../domain/context.ts';
import type { SessionEventKind } from '../domain/events.ts';
import type { Reservation } from '../domain/leases/index.ts';
import { Dec, formatAmount } from '../domain/ledger/index.ts';
import type { StoredProviderRates } from '../domain/pricing/index.ts';
import { formatRate, type HourlyRates } from '../domain/pricing/index.ts';
import type {
  BillingRecordRow,
  CurrentUsage,
  SessionEnd,
  SessionEventRow,
  SessionRow,
  SessionStart,
  UsageRecord,
  UsageResult,
} from '../domain/sessions/index.ts';
import { billedFrom, sessionRates } from '../domain/sessions/index.ts';
import type { StorageChargeRow } from '../domain/storage/index.ts';
import type { AutoPayoutSetting, EarningsSummary, TransactionRow, Wallet } from '../domain/wallets/index.ts';

/** What presenting needs: the token's scale and the app's cache of rate JSON. */
export interface PresentContext {
  scale: number;
  state: Pick<BillingState, 'ratesJson'>;
}

export const iso = (d: Date | string) => new Date(d).toISOString();
export const isoOrNull = (d: Date | string | null) => (d === null ? null : iso(d));

/** Frozen hourly rates, broken down (the parts that do not echo the request). */
export function ratesJson(r: HourlyRates, scale: number) {
  return {
    gpu_model: r.gpuModel,
    rate_key: r.rateKey,
    rate_source: r.rateSource,
    base_rate_per_gpu: formatRate(r.baseRatePerGpu, scale),
    base_hourly_rate: formatRate(r.baseHourlyRate, scale),
    vram_hourly_rate: formatRate(r.vramHourlyRate, scale),
    power_hourly_rate: formatRate(r.powerHourlyRate, scale),
    demand_multiplier: r.demandMultiplier.toFixed(),
    supply_factor: r.supplyFactor.toFixed(),
    total_hourly_rate: formatRate(r.totalHourlyRate, scale),
    platform_fee_percent: r.platformFeePercent.toFixed(),
  };
}

type SessionRatesJson = Omit<ReturnType<typeof ratesJson>, 'gpu_model'>;

/**
 * The `rates` member of a session: its frozen rates without the model (the session names it). A session's rates
 * never change and most sessions share a handful of rate sets, so the JSON is kept by the stored values in the
 * app's cache (every usage update answers with its session: nine decimals to format each time otherwise).
 */
function sessionRatesJson(p: PresentContext, s: SessionRow): Readonly<SessionRatesJson> {
  const key = [
    p.scale,
    s.rate_key,
    s.rate_source,
    s.base_rate_per_gpu,
    s.base_hourly_rate,
    s.vram_hourly_rate,
    s.power_hourly_rate,
    s.demand_multiplier,
    s.supply_factor,
    s.total_hourly_rate,
    s.platform_fee_percent,
  ].join('|');
  let json = p.state.ratesJson.get(key) as Readonly<SessionRatesJson> | undefined;
  if (!json) {
    const { gpu_model: _model, ...rates } = ratesJson(sessionRates(s), p.scale);
    json = Object.freeze(rates);
    p.state.ratesJson.set(key, json);
  }
  return json;
}

/** A rental session. */
export function sessionJson(p: PresentContext, s: SessionRow) {
  return {
    id: s.id,
    user_id: s.user_id,
    wallet_id: s.wallet_id,
    provider_id: s.provider_id,
    provider_wallet_id: s.provider_wallet_id,
    job_id: s.job_id,
    gpu_model: s.gpu_model,
    gpu_count: s.gpu_count,
    gpu_indices: s.gpu_indices,
    requested_vram_mb: s.requested_vram_mb,
    estimated_power_w: s.estimated_power_w,
    actual_power_w: s.actual_power_w === null ? null : new Dec(s.actual_power_w).toFixed(),
    rates: sessionRatesJson(p, s),
    status: s.status,
    hold_id: s.hold_id,
    lock_transaction_id: s.lock_transaction_id,
    billed_minutes: s.billed_minutes,
    total_cost: formatAmount(s.total_cost, p.scale),
    started_at: iso(s.started_at),
    last_usage_at: isoOrNull(s.last_usage_at),
    grace_until: isoOrNull(s.grace_until),
    spend_cap: s.spend_cap === null ? null : formatAmount(s.spend_cap, p.scale),
    spend_cap_ends_at: isoOrNull(s.cap_ends_at),
    low_balance_since: isoOrNull(s.low_balance_at),
    ended_at: isoOrNull(s.ended_at),
    end_reason: s.end_reason,
    workload: s.workload,
    billed_from: isoOrNull(billedFrom(s)),
    bid: s.bid === null ? null : formatAmount(s.bid, p.scale),
    preempted_by: s.preempted_by,
    rate_segments:
      s.rate_segments?.map((r) => ({
        from_minute: r.from_minute,
        hourly_rate: formatRate(new Dec(r.hourly_rate), p.scale),
        bid: r.bid === null ? null : formatAmount(r.bid, p.scale),
      })) ?? null,
    trace_context: traceContextJson(s.trace_context),
  };
}

/** A stored trace context as the wire carries it: `traceparent`, and `tracestate` when there is one. */
function traceContextJson(stored: Record<string, string> | null) {
  if (!stored?.traceparent) return null;
  return { traceparent: stored.traceparent, ...(stored.tracestate ? { tracestate: stored.tracestate } : {}) };
}

/** A session event as NATS carries it: its ID, kind and time, then its data (`session`, `billing_record`). */
export function sessionEventJson(e: SessionEventRow) {
  // Written by adapters/billing-events.ts with these presenters.
  const data = e.data as {
    session: ReturnType<typeof sessionJson>;
    billing_record?: ReturnType<typeof billingRecordJson>;
  };
  return { event_id: e.id, kind: e.kind as SessionEventKind, occurred_at: iso(e.occurred_at), ...data };
}

/** A billing record (one per ended session). */
export function billingRecordJson(b: BillingRecordRow, scale: number) {
  return {
    id: b.id,
    session_id: b.session_id,
    user_id: b.user_id,
    wallet_id: b.wallet_id,
    provider_id: b.provider_id,
    provider_wallet_id: b.provider_wallet_id,
    job_id: b.job_id,
    gpu_model: b.gpu_model,
    gpu_count: b.gpu_count,
    status: b.status,
    end_reason: b.end_reason,
    total_hourly_rate: formatRate(new Dec(b.total_hourly_rate), scale),
    billed_minutes: b.billed_minutes,
    total_cost: formatAmount(b.total_cost, scale),
    platform_fee: formatAmount(b.platform_fee, scale),
    provider_earnings: formatAmount(b.provider_earnings, scale),
    payment_transaction_id: b.payment_transaction_id,
    spend_cap: b.spend_cap === null ? null : formatAmount(b.spend_cap, scale),
    started_at: iso(b.started_at),
    ended_at: iso(b.ended_at),
    created_at: iso(b.created_at),
  };
}

/** A started session: the session, what was held and what the renter's balance pays for. */
export function sessionStartJson(p: PresentContext, s: SessionStart) {
  return {
    session: sessionJson(p, s.session),
    hold_amount: s.holdAmount.toFixed(p.scale),
    available_balance: s.availableAfter.toFixed(p.scale),
    estimated_runtime_minutes: s.estimatedRuntimeMinutes,
  };
}

/** An ended session and its billing record. */
export function sessionEndJson(p: PresentContext, end: SessionEnd) {
  return {
    session: sessionJson(p, end.session),
    billing_record: billingRecordJson(end.billingRecord, p.scale),
    already_ended: end.alreadyEnded,
  };
}

/** What a session has used so far. */
export function currentUsageJson(p: PresentContext, u: CurrentUsage) {
  const fmt = (d: Dec) => d.toFixed(p.scale);
  const s = u.session;
  return {
    session_id: s.id,
    status: s.status,
    started_at: iso(s.started_at),
    elapsed_seconds: Math.floor(u.elapsedMs / 1000),
    elapsed_minutes: u.minutes,
    total_hourly_rate: formatRate(u.hourlyRate, p.scale),
    cost_so_far: fmt(u.cost),
    billed_minutes: s.billed_minutes,
    billed_cost: fmt(new Dec(s.total_cost)),
    hold_amount: fmt(u.held),
    hold_remaining: fmt(u.holdLeft),
    available_balance: u.available ? fmt(u.available) : null,
    estimated_remaining_minutes: u.estimatedRemainingMinutes,
    actual_power_w: s.actual_power_w === null ? null : new Dec(s.actual_power_w).toFixed(),
    last_usage_at: isoOrNull(s.last_usage_at),
    grace_until: isoOrNull(s.grace_until),
    spend_cap: s.spend_cap === null ? null : formatAmount(s.spend_cap, p.scale),
    spend_cap_ends_at: isoOrNull(s.cap_ends_at),
    low_balance_since: isoOrNull(s.low_balance_at),
    end_reason: s.end_reason,
  };
}

/** A usage record. */
function usageRecordJson(r: UsageRecord) {
  return {
    id: r.id,
    session_id: r.sessionId,
    message_id: r.messageId,
    timestamp: r.reportedAt.toISOString(),
    gpu_utilization: r.gpuUtilization,
    power_draw_w: r.powerDrawW,
    metrics: r.metrics,
    billed_minutes: r.billedMinutes,
    cost: r.cost,
    created_at: r.createdAt.toISOString(),
  };
}

/** The answer to one usage update. */
export function usageResultJson(p: PresentContext, r: UsageResult) {
  return { duplicate: r.duplicate, usage: usageRecordJson(r.usage), session: sessionJson(p, r.session) };
}

/** A transaction record (the history users see). */
export function transactionJson(row: TransactionRow, scale: number) {
  return {
    id: row.id,
    wallet_id: row.wallet_id,
    type: row.type,
    status: row.status,
    amount: formatAmount(row.amount, scale),
    fee: formatAmount(row.fee, scale),
    signature: row.signature,
    destination: row.destination,
    failure_reason: row.failure_reason,
    hold_id: row.hold_id,
    reference: row.reference,
    created_at: iso(row.created_at),
    updated_at: iso(row.updated_at),
    confirmed_at: row.confirmed_at ? iso(row.confirmed_at) : null,
  };
}

/** A wallet. */
export function walletJson(w: Wallet) {
  return {
    id: w.id,
    owner_type: w.ownerType,
    owner_id: w.ownerId,
    holder_id: w.holderId,
    solana_address: w.solanaAddress,
    address_proven_at: w.addressProvenAt?.toISOString() ?? null,
    created_at: w.createdAt.toISOString(),
  };
}

/** A provider's earnings. */
export function earningsJson(e: EarningsSummary) {
  return {
    provider_id: e.providerId,
    wallet_id: e.walletId,
    total_earned: e.totalEarned,
    total_paid_out: e.totalPaidOut,
    pending_payouts: e.pendingPayouts,
    available_for_payout: e.availableForPayout,
    locked: e.locked,
    minimum_payout: e.minimumPayout,
  };
}

/** A provider's automatic payout setting. */
export function autoPayoutJson(a: AutoPayoutSetting) {
  return {
    provider_id: a.providerId,
    wallet_id: a.walletId,
    auto_payout: a.destination !== null,
    destination: a.destination,
    minimum_payout: a.minimumPayout,
    last_failure: a.lastFailure,
    next_attempt_at: a.nextAttemptAt?.toISOString() ?? null,
  };
}

/** A provider's own rates (empty base rates and nulls when it has none). */
export function providerRatesJson(providerId: string, r: StoredProviderRates | null) {
  return {
    provider_id: providerId,
    base_rates: r?.baseRates ?? {},
    vram_rate_per_gb_hour: r?.vramRatePerGbHour ?? null,
    power_rate_per_watt_hour: r?.powerRatePerWattHour ?? null,
    bid_floor: r?.bidFloor ?? null,
    updated_at: r?.updatedAt?.toISOString() ?? null,
  };
}

/** A period of a user's stored bytes, billed. */
export function storageChargeJson(c: StorageChargeRow, scale: number) {
  return {
    id: c.id,
    user_id: c.user_id,
    wallet_id: c.wallet_id,
    period_start: iso(c.period_start),
    period_end: iso(c.period_end),
    bytes: Number(c.bytes),
    gb_hours: new Dec(c.gb_hours).toFixed(),
    rate_per_gb_hour: formatRate(new Dec(c.rate_per_gb_hour), scale),
    cost: formatAmount(c.cost, scale),
    charged: formatAmount(c.charged, scale),
    unpaid: formatAmount(c.unpaid, scale),
    transaction_id: c.transaction_id,
    created_at: iso(c.created_at),
  };
}

/** A reservation of a machine's GPUs. */
export function reservationJson(r: Reservation) {
  return {
    id: r.id,
    user_id: r.userId,
    provider_id: r.providerId,
    gpu_model: r.gpuModel,
    gpu_indices: r.gpuIndices,
    expires_at: r.expiresAt.toISOString(),
  };
}
