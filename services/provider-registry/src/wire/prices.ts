/**
 * Billing's prices as the registry's bus reads them (`billing.events.pricing.*` over NATS, or its HTTP inbox without
 * NATS): one schema for each and one mapping to the domain's values, here. Unknown fields are dropped: a billing newer
 * than the registry keeps its prices flowing.
 */
import { ignoringUnknownFields, zTimestamp } from '@gpu/common';
import { z } from 'zod';
import type { PriceCard, ProviderPrices } from '../domain/market.ts';

/** A non-negative exact decimal, as billing writes rates. */
// Wider than what billing accepts (rates of at most 7 + 12 digits, model keys of at most 200 characters, its card's
// rates from its configuration): a price billing charges is never one the market drops.
const rate = z
  .string()
  .max(91)
  .regex(/^\d{1,30}(\.\d{1,60})?$/, 'expected a non-negative decimal string')
  .describe('tokens, an exact decimal string');
const modelKey = z.string().min(1).max(256);
const baseRates = z.record(modelKey, rate).describe('base rate per GPU-hour by model key (and `default`)');

const priceCardSchema = ignoringUnknownFields(
  z.object({
    occurred_at: zTimestamp().describe('when billing made this card: an older card than the one held is ignored'),
    base_rates: baseRates,
    vram_rate_per_gb_hour: rate,
    power_rate_per_watt_hour: rate,
    factors: z
      .record(modelKey, z.object({ demand: rate, supply: rate }))
      .default({})
      .describe('demand and supply factors by model key (and `default`); 1 where absent'),
  }),
).describe("The platform's price card, as billing charges it");

const providerPricesSchema = ignoringUnknownFields(
  z.object({
    occurred_at: zTimestamp().describe('when billing stored these rates: older ones than held are ignored'),
    base_rates: baseRates,
    vram_rate_per_gb_hour: rate.nullable(),
    power_rate_per_watt_hour: rate.nullable(),
    bid_floor: rate
      .refine((r) => /[1-9]/.test(r), 'a bid floor is more than 0')
      .nullable()
      .default(null)
      .describe('the lowest bid per GPU-hour it takes for an interruptible rental; null: it takes no bids'),
  }),
).describe("A machine's own rates (null, or a model absent: the platform's apply)");

export type PriceCardBody = z.infer<typeof priceCardSchema>;
export type ProviderPricesBody = z.infer<typeof providerPricesSchema>;

export function toPriceCard(b: PriceCardBody): PriceCard {
  return {
    baseRates: b.base_rates,
    vramRate: b.vram_rate_per_gb_hour,
    powerRate: b.power_rate_per_watt_hour,
    factors: b.factors,
  };
}

export function toProviderPrices(b: ProviderPricesBody): ProviderPrices {
  return {
    baseRates: b.base_rates,
    vramRate: b.vram_rate_per_gb_hour,
    powerRate: b.power_rate_per_watt_hour,
    bidFloor: b.bid_floor,
  };
}

/** Billing's event of the platform's card (`pricing.platform_rates`). */
export const platformRatesEventSchema = ignoringUnknownFields(
  z.object({ kind: z.literal('pricing.platform_rates'), card: priceCardSchema }),
).describe("The platform's price card, as billing announces it");

/** Billing's event of a machine's own rates (`pricing.provider_rates`). */
export const providerRatesEventSchema = ignoringUnknownFields(
  z.object({ kind: z.literal('pricing.provider_rates'), provider_id: z.uuid(), rates: providerPricesSchema }),
).describe("A machine's own rates, as billing stored them");
