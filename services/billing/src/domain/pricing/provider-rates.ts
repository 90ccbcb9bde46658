/**
 * Provider-specific rates: a provider's own base rates per GPU model (and its
 * own `default`), VRAM and power rates. Parts a provider does not set fall
 * back to the platform's rates. A session freezes the rates it starts with, so
 * changing them never re-prices a running session.
 */
import { createHash } from 'node:crypto';
import { ifMatchHolds, isPrivileged, type Principal } from '@gpu/common';
import type { Kysely, Transaction } from 'kysely';
import {
  findProviderRatesRow,
  lockProviderRates,
  lockUnannouncedProviderRates,
  markRatesAnnounced,
  type ProviderRatesRow,
  upsertProviderRates,
} from '../../db/rates-repository.ts';
import type { BillingDB } from '../../db/schema.ts';
import { billingErrors } from '../../errors.ts';
import type { BillingContext, PricingSettings } from '../context.ts';
import { Dec } from '../ledger/index.ts';
import { findProviderAccount, registryOwner } from '../wallets/index.ts';
import { type HourlyRates, hourlyRates, type PricingInput, type ProviderRateOverrides } from './pricing.ts';

type Db = Kysely<BillingDB> | Transaction<BillingDB>;

export interface StoredProviderRates extends ProviderRateOverrides {
  providerId: string;
  updatedAt: Date | null;
}

/** The provider's overrides, or null when it has none. */
export async function findProviderRates(db: Db, providerId: string): Promise<StoredProviderRates | null> {
  const row = await findProviderRatesRow(db, providerId);
  return row ? storedRates(row) : null;
}

function storedRates(row: ProviderRatesRow): StoredProviderRates {
  return {
    providerId: row.provider_id,
    baseRates: row.base_rates,
    vramRatePerGbHour: row.vram_rate_per_gb_hour,
    powerRatePerWattHour: row.power_rate_per_watt_hour,
    bidFloor: row.bid_floor,
    updatedAt: new Date(row.updated_at),
  };
}

/**
 * The entity tag of a provider's rates as they are (quoted, strong): what `GET /provider/{id}/rates` sends as `ETag`
 * and a change sends back as `If-Match`, so that a read, changed and written back never overwrites a change made in
 * between. The tag covers the rates and `updated_at` (to the millisecond): two writes of different rates always
 * differ; two of the same rates within a millisecond may share a tag, which loses nothing.
 */
export function ratesEtag(stored: StoredProviderRates | null): string {
  const state = stored
    ? [
        stored.baseRates,
        stored.vramRatePerGbHour,
        stored.powerRatePerWattHour,
        stored.bidFloor ?? null,
        stored.updatedAt?.toISOString() ?? null,
      ]
    : null;
  return `"${createHash('sha256').update(JSON.stringify(state)).digest('base64url').slice(0, 27)}"`;
}

/** Replaces a provider's overrides (base rate keys must already be normalised). */
async function putProviderRates(
  db: Db,
  providerId: string,
  rates: ProviderRateOverrides,
): Promise<StoredProviderRates> {
  const values = {
    base_rates: JSON.stringify(rates.baseRates),
    vram_rate_per_gb_hour: rates.vramRatePerGbHour,
    power_rate_per_watt_hour: rates.powerRatePerWattHour,
    bid_floor: rates.bidFloor ?? null,
  };
  await upsertProviderRates(db, providerId, values);
  return (await findProviderRates(db, providerId))!;
}

/** The hourly rates of a rental: the provider's overrides (when `providerId` is given) over the platform's. */
export async function ratesFor(db: Db, pricing: PricingSettings, input: PricingInput): Promise<HourlyRates> {
  const overrides = input.providerId ? await findProviderRates(db, input.providerId) : null;
  return hourlyRates(input, pricing.card, overrides, pricing.platformFeePercent, pricing.market);
}

/** Refuses a rate above the configured limits (RATE_OUT_OF_BOUNDS, naming the body path). */
function assertWithinLimits(rates: ProviderRateOverrides, limits: PricingSettings['providerLimits']): void {
  for (const [model, rate] of Object.entries(rates.baseRates)) {
    if (new Dec(rate).gt(limits.baseRate)) {
      throw billingErrors.rateOutOfBounds(`body.base_rates.${model}`, rate, limits.baseRate);
    }
  }
  const { vramRatePerGbHour: vram, powerRatePerWattHour: power } = rates;
  if (vram !== null && new Dec(vram).gt(limits.vramRatePerGbHour)) {
    throw billingErrors.rateOutOfBounds('body.vram_rate_per_gb_hour', vram, limits.vramRatePerGbHour);
  }
  if (power !== null && new Dec(power).gt(limits.powerRatePerWattHour)) {
    throw billingErrors.rateOutOfBounds('body.power_rate_per_watt_hour', power, limits.powerRatePerWattHour);
  }
}

/**
 * Sets a provider's rates for its owner (or an admin or service): the owner is its wallet's holder, else the
 * registry's (PROVIDER_NOT_FOUND when it does not know the machine). Anyone else: 403 NOT_PROVIDER_OWNER, the same
 * whether or not the machine has a wallet.
 */
export async function setProviderRates(
  ctx: BillingContext,
  actor: Principal,
  providerId: string,
  rates: ProviderRateOverrides,
  opts: { correlationId?: string; ifMatch?: string } = {},
): Promise<StoredProviderRates> {
  const { correlationId, ifMatch } = opts;
  const wallet = await findProviderAccount(ctx, actor, providerId, 'manage', correlationId);
  // Rates for a machine the registry does not know would never apply: 404 for the privileged too.
  if (!wallet && isPrivileged(actor)) await registryOwner(ctx, providerId, correlationId);
  assertWithinLimits(rates, ctx.pricing.providerLimits);
  // The rates and their announcement to the market (the registry's offers) commit together.
  return ctx.db.transaction().execute(async (trx) => {
    // One change of the machine's rates at a time, with If-Match or not: a conditional change is checked against the
    // rates as they are while it holds the lock.
    await lockProviderRates(trx, providerId);
    if (ifMatch !== undefined) {
      const current = ratesEtag(await findProviderRates(trx, providerId));
      if (!ifMatchHolds(ifMatch, current)) throw billingErrors.ratesChanged(providerId, current);
    }
    const stored = await putProviderRates(trx, providerId, rates);
    await announceProviderRates(ctx, trx, stored);
    return stored;
  });
}

/**
 * Announces billing's prices to the market (the registry's offers): the platform's card (its base rates, VRAM and
 * power rates, and the demand and supply factors billing applies now to each model of the card and `default`: the
 * card is each instance's configuration, so each announces it at start-up), and the machines' own rates that were
 * never announced as they are (set before the market existed): once, by whichever instance locks them first. Rates set
 * since are announced with their change, in its transaction; the outbox delivers what is recorded. The registry
 * keeps the newest of each.
 */
export async function announcePrices(ctx: BillingContext, correlationId?: string): Promise<void> {
  const { card, market } = ctx.pricing;
  const factors: Record<string, { demand: string; supply: string }> = {};
  for (const gpuModel of new Set([...Object.keys(card.baseRates), 'default'])) {
    factors[gpuModel] = {
      demand: new Dec(await market.demandMultiplier({ gpuModel })).toFixed(),
      supply: new Dec(await market.supplyFactor({ gpuModel })).toFixed(),
    };
  }
  await ctx.events.record(
    ctx.db,
    {
      kind: 'pricing.platform_rates',
      card: {
        baseRates: card.baseRates,
        vramRatePerGbHour: card.vramRatePerGbHour,
        powerRatePerWattHour: card.powerRatePerWattHour,
        factors,
        at: ctx.now(),
      },
    },
    correlationId,
  );
  await ctx.db.transaction().execute(async (trx) => {
    for (const row of await lockUnannouncedProviderRates(trx)) {
      await announceProviderRates(ctx, trx, storedRates(row), correlationId);
    }
  });
}

/** Records the machine's rates, as stored, for the market, and marks them announced (in the caller's transaction). */
async function announceProviderRates(
  ctx: BillingContext,
  trx: Transaction<BillingDB>,
  stored: StoredProviderRates,
  correlationId?: string,
): Promise<void> {
  await ctx.events.record(
    trx,
    {
      kind: 'pricing.provider_rates',
      rates: {
        providerId: stored.providerId,
        baseRates: stored.baseRates,
        vramRatePerGbHour: stored.vramRatePerGbHour,
        powerRatePerWattHour: stored.powerRatePerWattHour,
        bidFloor: stored.bidFloor ?? null,
        at: stored.updatedAt ?? ctx.now(),
      },
    },
    correlationId,
  );
  await markRatesAnnounced(trx, stored.providerId);
}
