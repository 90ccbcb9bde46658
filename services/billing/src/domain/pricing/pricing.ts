/**
 * Pricing: the hourly rate of a GPU rental and the cost of a duration. The hourly rate is the platform's one price
 * formula (`hourlyPrice` in @gpu/common, which the registry renders into its offers' SQL):
 *
 *   base_hourly_rate  = rate of the GPU model × gpu_count
 *   vram_hourly_rate  = requested_vram_mb / 1024 (GB) × vram_rate_per_gb_hour
 *   power_hourly_rate = estimated_power_w × power_rate_per_watt_hour
 *   total_hourly_rate = (base + vram + power) × demand_multiplier × supply_factor
 *   total_cost        = total_hourly_rate × duration_hours, rounded half-even to the token's scale
 *   platform_fee      = platform_fee_percent % of total_cost, rounded half-even; provider_earnings = the rest
 *
 * Rates are exact (never rounded); only derived token amounts are rounded, once.
 * The model's rate: the provider's own table (that model, then its `default`),
 * then the platform's (that model, then `default`). Model names are matched by
 * the platform's model key (`gpuModelKey` in @gpu/common): a known model by its
 * family, whatever the driver prints (`NVIDIA H100 80GB HBM3` → `nvidia-tesla-h100`),
 * anything else by its spelling (lower case, spaces and underscores as `-`).
 */
import {
  gpuModelKey,
  hourlyPrice,
  NEUTRAL_FACTOR,
  type PriceArithmetic,
  RATE_LOOKUP,
  UNPRICED_RATE,
} from '@gpu/common';
import type { RateSegment } from '../../db/schema.ts';
import { Dec, roundAmount, splitFee } from '../ledger/index.ts';

/** The rate key of a model name: `NVIDIA GeForce RTX 4090` → `nvidia-geforce-rtx-4090`. */
export function normalizeModel(name: string): string {
  return gpuModelKey(name);
}

/** A rate table: base hourly rates per normalised model (with `default`), VRAM and power rates. */
export interface RateCard {
  baseRates: Record<string, string>;
  vramRatePerGbHour: string;
  powerRatePerWattHour: string;
}

/** A provider's overrides; absent parts fall back to the platform's card. */
export interface ProviderRateOverrides {
  baseRates: Record<string, string>;
  vramRatePerGbHour: string | null;
  powerRatePerWattHour: string | null;
  /** The lowest bid per GPU-hour the machine takes for an interruptible lease; null or absent: it takes no bids. */
  bidFloor?: string | null;
}

/** Demand and supply factors: placeholders in the spec, pluggable here, 1.0 by default. */
export interface MarketFactors {
  demandMultiplier(input: { gpuModel: string; providerId?: string }): Promise<Dec> | Dec;
  supplyFactor(input: { gpuModel: string; providerId?: string }): Promise<Dec> | Dec;
}

/** Both factors neutral (1, as the registry's offers take an unset factor). */
export const neutralMarket: MarketFactors = {
  demandMultiplier: () => new Dec(NEUTRAL_FACTOR),
  supplyFactor: () => new Dec(NEUTRAL_FACTOR),
};

export interface PricingInput {
  gpuModel: string;
  gpuCount: number;
  requestedVramMb: number;
  estimatedPowerW: number;
  providerId?: string;
}

/** The frozen rates of a rental: what a session keeps for its whole life. */
export interface HourlyRates {
  gpuModel: string;
  /** Which table entry priced the model (`default` for unknown models; `bid`: the renter's bid). */
  rateKey: string;
  rateSource: 'platform' | 'provider' | 'bid';
  baseRatePerGpu: Dec;
  baseHourlyRate: Dec;
  vramHourlyRate: Dec;
  powerHourlyRate: Dec;
  demandMultiplier: Dec;
  supplyFactor: Dec;
  totalHourlyRate: Dec;
  platformFeePercent: Dec;
}

function pickRate(
  model: string,
  platform: RateCard,
  provider: ProviderRateOverrides | null,
): { key: string; rate: string; source: 'platform' | 'provider' } {
  for (const step of RATE_LOOKUP) {
    const table = step.table === 'provider' ? provider?.baseRates : platform.baseRates;
    const key = step.key === 'model' ? model : 'default';
    // Its own entries only: `constructor`, a model name like any other, is also every object's.
    const rate = table && Object.hasOwn(table, key) ? table[key] : undefined;
    if (rate !== undefined) return { key, rate, source: step.table };
  }
  return { key: 'default', rate: UNPRICED_RATE, source: 'platform' };
}

/** decimal.js, exact, for the price formula. */
const decimals: PriceArithmetic<Dec> = {
  add: (a, b) => a.plus(b),
  mul: (a, b) => a.mul(b),
  div: (a, b) => a.div(b),
  constant: (value) => new Dec(value),
};

/** The hourly rates of a rental on a provider (its overrides, when it has any). */
export async function hourlyRates(
  input: PricingInput,
  platform: RateCard,
  provider: ProviderRateOverrides | null,
  platformFeePercent: string,
  market: MarketFactors = neutralMarket,
): Promise<HourlyRates> {
  const gpuModel = normalizeModel(input.gpuModel);
  const picked = pickRate(gpuModel, platform, provider);
  const vramRate = new Dec(provider?.vramRatePerGbHour ?? platform.vramRatePerGbHour);
  const powerRate = new Dec(provider?.powerRatePerWattHour ?? platform.powerRatePerWattHour);
  const factorInput = { gpuModel, providerId: input.providerId };
  const demandMultiplier = new Dec(await market.demandMultiplier(factorInput));
  const supplyFactor = new Dec(await market.supplyFactor(factorInput));
  const baseRatePerGpu = new Dec(picked.rate);
  const price = hourlyPrice(decimals, {
    baseRatePerGpu,
    gpus: new Dec(input.gpuCount),
    vramMb: new Dec(input.requestedVramMb),
    vramRatePerGbHour: vramRate,
    powerW: new Dec(input.estimatedPowerW),
    powerRatePerWattHour: powerRate,
    demand: demandMultiplier,
    supply: supplyFactor,
  });
  return {
    gpuModel,
    rateKey: picked.key,
    rateSource: picked.source,
    baseRatePerGpu,
    baseHourlyRate: price.base,
    vramHourlyRate: price.vram,
    powerHourlyRate: price.power,
    demandMultiplier,
    supplyFactor,
    totalHourlyRate: price.total,
    platformFeePercent: new Dec(platformFeePercent),
  };
}

/**
 * The frozen rates of an interruptible rental: the renter pays their bid per GPU-hour, all in (no VRAM or power part,
 * no market factor), and the platform's fee comes out of it as out of any price.
 */
export function bidRates(input: PricingInput, bid: Dec, platformFeePercent: string): HourlyRates {
  const base = bid.mul(input.gpuCount);
  return {
    gpuModel: normalizeModel(input.gpuModel),
    rateKey: 'bid',
    rateSource: 'bid',
    baseRatePerGpu: bid,
    baseHourlyRate: base,
    vramHourlyRate: new Dec(0),
    powerHourlyRate: new Dec(0),
    demandMultiplier: new Dec(NEUTRAL_FACTOR),
    supplyFactor: new Dec(NEUTRAL_FACTOR),
    totalHourlyRate: base,
    platformFeePercent: new Dec(platformFeePercent),
  };
}

/** Cost of `hours` at `hourlyRate`, rounded half-even to the scale. */
export function costOfHours(hourlyRate: Dec, hours: Dec, scale: number): Dec {
  return roundAmount(hourlyRate.mul(hours), scale);
}

/** Cost of whole `minutes` at `hourlyRate` (one rounding of the whole amount, never per minute). */
export function costOfMinutes(hourlyRate: Dec, minutes: number, scale: number): Dec {
  return roundAmount(hourlyRate.mul(minutes).div(60), scale);
}

/** The cost of a duration, its platform fee and the provider's share. */
export function quote(rates: HourlyRates, hours: Dec, scale: number) {
  const totalCost = costOfHours(rates.totalHourlyRate, hours, scale);
  const { fee, rest } = splitFee(totalCost, rates.platformFeePercent, scale);
  return { totalCost, platformFee: fee, providerEarnings: rest };
}

/** A rate as a string: exact, with at least the token's decimals (`0.5` → `0.500000`). */
export function formatRate(value: Dec, scale: number): string {
  return value.toFixed(Math.max(scale, value.decimalPlaces()));
}

const MINUTE_MS = 60_000;

/**
 * The longest time any funds pay for: a century. A spend cap of 1e14 tokens at 5 an hour pays for 2.3 million years,
 * past the last date a Date (and PostgreSQL's timestamptz) holds: its deadline was an Invalid Date, and every write
 * of it failed (a start's 500, a workload's `running` refused, so never billed). Past a century is never.
 */
const MAX_PAID_MS = 100 * 365 * 24 * 3_600_000;

/**
 * How long `funds` pay for at `hourlyRate`, in milliseconds rounded up (at most `MAX_PAID_MS`): the moment they are
 * spent (a spend cap's end, counted from the session's start).
 */
export function msPaidFor(funds: Dec, hourlyRate: Dec): number {
  return Dec.min(funds.mul(3_600_000).div(hourlyRate).ceil(), MAX_PAID_MS).toNumber();
}

/** Minutes billed for `elapsedMs`: started minutes when completing, full minutes when terminating. */
export function billableMinutes(elapsedMs: number, roundUp: boolean): number {
  const ms = Math.max(0, elapsedMs);
  return roundUp ? Math.ceil(ms / MINUTE_MS) : Math.floor(ms / MINUTE_MS);
}

// ---- A session's rates by minute ----

/*
 * A session's rates by minute of its clock. A session's rate is frozen at its start; only an interruptible session's
 * bid may change while it runs (domain/sessions/bids.ts), and then the session keeps its rates by minute (`rate_segments`): **each
 * minute is billed at the highest rate in force at any moment of it**. A raise prices the minute in progress at once;
 * a cut takes effect at the next minute. So a renter who raises a bid for a moment (to keep GPUs a higher bid would
 * take) pays the raise for that minute, and one who cuts it pays the old bid to the minute's end: no minute is ever
 * protected by a bid that did not pay for it.
 *
 * Costs: each segment's whole minutes at its rate, rounded once per segment (as a session's cost is rounded once), and
 * summed. A session that never changed (`rate_segments` null) costs what it always did: `total_hourly_rate` × minutes,
 * one rounding.
 */

/** What a session's rates by minute are read from (its row's columns). */
interface Rated {
  rate_segments: RateSegment[] | null;
  total_hourly_rate: string;
  bid: string | null;
}

/** The session's rates by minute: one segment from its first minute when its rate never changed. */
function rateSegments(s: Rated): RateSegment[] {
  return s.rate_segments ?? [{ from_minute: 0, hourly_rate: s.total_hourly_rate, bid: s.bid }];
}

/** Each segment with the minute it ends before (Infinity for the one in force). */
function spans(s: Rated) {
  const segs = rateSegments(s);
  return segs.map((seg, i) => ({
    from: seg.from_minute,
    to: segs[i + 1]?.from_minute ?? Number.POSITIVE_INFINITY,
    rate: new Dec(seg.hourly_rate),
  }));
}

/** The cost of the first `minutes` minutes of the session's clock. */
export function costOfSessionMinutes(s: Rated, minutes: number, scale: number): Dec {
  if (s.rate_segments === null) return costOfMinutes(new Dec(s.total_hourly_rate), minutes, scale);
  let cost = new Dec(0);
  for (const { from, to, rate } of spans(s)) {
    const span = Math.min(minutes, to) - from;
    if (span > 0) cost = cost.plus(costOfMinutes(rate, span, scale));
  }
  return cost;
}

/** The most whole minutes of the session's clock `funds` pay for. */
export function minutesPaidFor(s: Rated, funds: Dec, scale: number): number {
  let left = funds;
  for (const { from, to, rate } of spans(s)) {
    if (to !== Number.POSITIVE_INFINITY) {
      const whole = costOfMinutes(rate, to - from, scale);
      if (whole.lte(left)) {
        left = left.minus(whole);
        continue;
      }
    }
    return from + left.mul(60).div(rate).floor().toNumber();
  }
  return 0;
}

/**
 * Milliseconds of the session's clock `funds` pay for (rounded up, at most `MAX_PAID_MS`): a cap's deadline, the time
 * a hold pays until.
 */
export function msPaidForSession(s: Rated, funds: Dec): number {
  let left = funds;
  for (const { from, to, rate } of spans(s)) {
    if (to !== Number.POSITIVE_INFINITY) {
      const whole = rate.mul(to - from).div(60);
      if (whole.lte(left)) {
        left = left.minus(whole);
        continue;
      }
    }
    return Math.min(from * MINUTE_MS + msPaidFor(left, rate), MAX_PAID_MS);
  }
  return 0;
}

/**
 * The segments after the rate changes to `hourlyRate` (bid `bid`) at `elapsedMs` of the session's clock (0 before it
 * starts): the minute in progress at the higher of its rate and the new one, the new rate from the next minute on;
 * neighbours at one rate merged. Null when one rate remains from the first minute.
 */
export function changedSegments(
  s: Rated,
  change: { hourlyRate: Dec; bid: string | null },
  elapsedMs: number,
): RateSegment[] | null {
  const next: RateSegment = { from_minute: 0, hourly_rate: change.hourlyRate.toFixed(), bid: change.bid };
  const current = Math.floor(elapsedMs / MINUTE_MS);
  const segs = rateSegments(s);
  const inProgress = segs.filter((seg) => seg.from_minute <= current).at(-1)!;
  const raised = change.hourlyRate.gt(inProgress.hourly_rate);
  const merged: RateSegment[] = [];
  for (const seg of [
    ...segs.filter((seg) => seg.from_minute < current),
    { ...(raised ? next : inProgress), from_minute: current },
    { ...next, from_minute: current + 1 },
  ]) {
    const last = merged.at(-1);
    if (!last || !new Dec(last.hourly_rate).eq(seg.hourly_rate)) merged.push(seg);
  }
  return merged.length === 1 ? null : merged;
}
