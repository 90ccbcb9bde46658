/** Rental sessions and billing records: row types, their JSON and shared reads. */
import type { Kysely, Selectable, Transaction } from 'kysely';
import type { BillingRecordRow } from '../db/billing-record-repository.ts';
import type { BillingDB, RentalSessionTable } from '../db/schema.ts';
import { billingErrors } from '../errors.ts';
import type { BoundedCache } from './bounded-cache.ts';
import { Dec, formatAmount } from './money.ts';
import { formatRate, type HourlyRates } from './pricing.ts';

export type SessionRow = Selectable<RentalSessionTable>;
export type { BillingRecordRow };

type Db = Kysely<BillingDB> | Transaction<BillingDB>;

const iso = (d: Date | string | null) => (d === null ? null : new Date(d).toISOString());

/** The statuses of a running session: billed by the biller, accepting usage updates, endable. */
export const RUNNING_STATUSES = ['active', 'grace_period'] as const satisfies readonly SessionRow['status'][];

/** Whether a session is still running (billed, usage accepted). */
export const isRunning = (s: { status: string }) => (RUNNING_STATUSES as readonly string[]).includes(s.status);

/** The frozen rates of a session. */
export function sessionRates(s: SessionRow): HourlyRates {
  return {
    gpuModel: s.gpu_model,
    rateKey: s.rate_key,
    rateSource: s.rate_source,
    baseRatePerGpu: new Dec(s.base_rate_per_gpu),
    baseHourlyRate: new Dec(s.base_hourly_rate),
    vramHourlyRate: new Dec(s.vram_hourly_rate),
    powerHourlyRate: new Dec(s.power_hourly_rate),
    demandMultiplier: new Dec(s.demand_multiplier),
    supplyFactor: new Dec(s.supply_factor),
    totalHourlyRate: new Dec(s.total_hourly_rate),
    platformFeePercent: new Dec(s.platform_fee_percent),
  };
}

/** The `rates` member of a session's JSON. */
function ratesJson(s: SessionRow, scale: number) {
  const r = sessionRates(s);
  return {
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

type RatesJson = Readonly<Record<string, string>>;

/**
 * A session's rates never change and most sessions share a handful of rate sets, so their JSON is kept by the
 * stored values in the context's cache (every usage update answers with its session: nine decimals to format each
 * time otherwise).
 */
function cachedRatesJson(s: SessionRow, scale: number, cache?: BoundedCache<RatesJson>): RatesJson {
  if (!cache) return ratesJson(s, scale);
  const key = [
    scale,
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
  let json = cache.get(key);
  if (!json) {
    json = Object.freeze(ratesJson(s, scale));
    cache.set(key, json);
  }
  return json;
}

/** The JSON of a session (snake_case, decimal strings, RFC 3339 UTC). */
export function sessionJson(s: SessionRow, scale: number, ratesCache?: BoundedCache<RatesJson>) {
  return {
    id: s.id,
    user_id: s.user_id,
    wallet_id: s.wallet_id,
    provider_id: s.provider_id,
    provider_wallet_id: s.provider_wallet_id,
    job_id: s.job_id,
    gpu_model: s.gpu_model,
    gpu_count: s.gpu_count,
    requested_vram_mb: s.requested_vram_mb,
    estimated_power_w: s.estimated_power_w,
    actual_power_w: s.actual_power_w === null ? null : new Dec(s.actual_power_w).toFixed(),
    rates: cachedRatesJson(s, scale, ratesCache) as ReturnType<typeof ratesJson>,
    status: s.status,
    hold_id: s.hold_id,
    lock_transaction_id: s.lock_transaction_id,
    billed_minutes: s.billed_minutes,
    total_cost: formatAmount(s.total_cost, scale),
    started_at: iso(s.started_at)!,
    last_usage_at: iso(s.last_usage_at),
    grace_until: iso(s.grace_until),
    ended_at: iso(s.ended_at),
    end_reason: s.end_reason,
  };
}

export type SessionJson = ReturnType<typeof sessionJson>;

/** The JSON of a billing record. */
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
    started_at: iso(b.started_at)!,
    ended_at: iso(b.ended_at)!,
    created_at: iso(b.created_at)!,
  };
}

export type BillingRecordJson = ReturnType<typeof billingRecordJson>;

/** Reads a session (404 SESSION_NOT_FOUND), optionally locking its row. */
export async function loadSession(db: Db, id: string, lock = false): Promise<SessionRow> {
  let q = db.selectFrom('rental_sessions').selectAll().where('id', '=', id);
  if (lock) q = q.forUpdate();
  const row = await q.executeTakeFirst();
  if (!row) throw billingErrors.sessionNotFound(id);
  return row;
}

/** Locks a wallet's ledger accounts (in ID order, like ledger_post) and returns its available balance. */
export async function lockWalletAvailable(trx: Transaction<BillingDB>, walletId: string): Promise<Dec> {
  const rows = await trx
    .selectFrom('ledger_accounts')
    .select(['kind', 'balance'])
    .where('wallet_id', '=', walletId)
    .orderBy('id')
    .forUpdate()
    .execute();
  return new Dec(rows.find((r) => r.kind === 'available')?.balance ?? 0);
}
