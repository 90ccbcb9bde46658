/** Pricing routes: estimates, the platform's rates, and provider-specific rates. */
import { type App, assertScope, authenticate, callerOf, errors, ifMatchHeader } from '@gpu/common';
import { z } from 'zod';
import { quotedResources } from '../domain/leases/index.ts';
import { Dec } from '../domain/ledger/index.ts';
import {
  findProviderRates,
  formatRate,
  normalizeModel,
  quote,
  ratesEtag,
  ratesFor,
  setProviderRates,
} from '../domain/pricing/index.ts';
import { providerRatesJson, ratesJson } from '../wire/presenters.ts';
import { PROVIDER_ROLES } from './access.ts';
import type { RouteDeps } from './deps.ts';
import { problems, providerParams, schemas } from './schemas.ts';
import { pricingInputShape, ratesSchema } from './session-schemas.ts';

/** The longest time priced: 10 years. */
const MAX_HOURS = 87_600;
const HOURS_MESSAGE = `must be greater than 0 and at most ${MAX_HOURS} (10 years)`;
/**
 * A decimal string of hours in (0, 87600]: 1 to 87599 with any fraction, 87600 with none, or a positive fraction of
 * one (no leading zeros, no exponent): the range as the document's `pattern` states it.
 */
const HOURS_TEXT = /^(?:(?:[1-9]\d{0,3}|[1-7]\d{4}|8[0-6]\d{3}|87[0-5]\d{2})(?:\.\d+)?|87600(?:\.0+)?|0\.\d*[1-9]\d*)$/;

const durationHours = z
  .union([
    z.string().max(64).regex(HOURS_TEXT, HOURS_MESSAGE),
    z.number().gt(0, HOURS_MESSAGE).max(MAX_HOURS, HOURS_MESSAGE),
  ])
  .transform((v) => new Dec(v))
  .prefault(1)
  .describe('hours to price, decimal string or number (default 1)');

const RATE = /^(0|[1-9]\d{0,6})(\.\d{1,12})?$/;

/** A rate in a provider's table: a decimal string with at most 12 decimals (no spaces, commas or exponents). */
const rateString = z.string().max(20).regex(RATE, 'must be a decimal string like "0.45" (at most 12 decimals)');

const providerRatesBody = z
  .object({
    base_rates: z
      .record(
        z.string().min(1).max(200),
        // zod runs a refinement after a failed regex too: parse only what the regex accepted.
        rateString.refine((r) => !RATE.test(r) || new Dec(r).gt(0), 'a base rate must be above 0'),
      )
      .default({})
      .describe('GPU model → hourly rate per GPU; `default` prices models not listed'),
    vram_rate_per_gb_hour: rateString.nullable().default(null).describe('null: the platform rate'),
    power_rate_per_watt_hour: rateString.nullable().default(null).describe('null: the platform rate'),
    bid_floor: rateString
      .regex(/^(?!0+(?:\.0+)?$)/, 'a bid floor must be above 0')
      .nullable()
      .default(null)
      .describe(
        'the lowest bid per GPU-hour the machine takes for an interruptible rental (POST /billing/start-session ' +
          "with `bid`); null: it takes no bids. Interruptible sessions' GPUs go back to on-demand renters and higher bids",
      ),
    // The rates as GET answers them can be sent back changed: their read-only fields are known.
    provider_id: z.uuid().optional().describe('read-only: must be the provider of the path'),
    updated_at: z.string().max(64).nullable().optional().describe('read-only: ignored'),
  })
  .register(schemas, { id: 'ProviderRatesUpdate' });

const providerRatesSchema = z
  .object({
    provider_id: z.uuid(),
    base_rates: z.record(z.string(), z.string()),
    vram_rate_per_gb_hour: z.string().nullable(),
    power_rate_per_watt_hour: z.string().nullable(),
    bid_floor: z.string().nullable().describe('the lowest bid per GPU-hour it takes; null: it takes no bids'),
    updated_at: z.string().nullable().describe('null: the provider has no rates of its own'),
  })
  .register(schemas, { id: 'ProviderRates' });

const priceRequestBody = z
  .object({ ...pricingInputShape, duration_hours: durationHours })
  .register(schemas, { id: 'PriceRequest' });

const priceQuoteSchema = ratesSchema
  .extend({
    duration_hours: z.string(),
    total_cost: z.string(),
    platform_fee: z.string(),
    provider_earnings: z.string(),
  })
  .register(schemas, { id: 'PriceQuote' });

const platformRatesSchema = z
  .object({
    base_rates: z.record(z.string(), z.string()),
    default_rate: z.string(),
    vram_rate_per_gb_hour: z.string(),
    power_rate_per_watt_hour: z.string(),
    demand_multiplier: z.string(),
    supply_factor: z.string(),
    platform_fee_percent: z.string(),
    storage_rate_per_gb_hour: z
      .string()
      .describe("what a GB of stored objects costs an hour (GET /billing/storage-usage: a user's storage charges)"),
  })
  .register(schemas, { id: 'PlatformRates' });

export async function pricingRoutes(app: App, deps: RouteDeps) {
  const ctx = deps.billing;

  app.post(
    '/api/v1/pricing/calculate',
    {
      // Public, but a quote with a provider's own rates needs a token (401 without).
      config: { public: true, openapi: { tokenOptional: true } },
      schema: {
        tags: ['pricing'],
        operationId: 'calculatePrice',
        summary: 'Price a rental: the hourly rate broken down, the total cost and its fee split',
        description:
          'total_hourly_rate = (base rate of the model × gpu_count + requested_vram_mb/1024 × VRAM rate + ' +
          'estimated_power_w × power rate) × demand_multiplier × supply_factor. total_cost = total_hourly_rate × ' +
          "duration_hours rounded half-even to the token's decimals; platform_fee is platform_fee_percent of it " +
          "(rounded half-even), provider_earnings the rest. With provider_id, that provider's rates apply, and " +
          "with a provider registry the machine's record (its GPUs' model, VRAM and power) is priced as a session " +
          'start would price it: the GPUs a start would lease now, `gpu_count` of the free ones (a token is then ' +
          "needed: 401 without; 404 PROVIDER_NOT_FOUND; 409 GPU_GROUP_TOO_SMALL below the machine's " +
          '`min_gpus_per_rental`, 409 PROVIDER_NOT_AVAILABLE when it has fewer healthy GPUs of the model). ' +
          'Unknown models are priced at the `default` rate (rate_key "default"). An API key quotes a machine with the ' +
          'scope offers (403 INSUFFICIENT_SCOPE without).',
        body: priceRequestBody,
        response: {
          200: priceQuoteSchema,
          ...problems(400, 401, 403, 404, 409, 503),
        },
      },
    },
    async (request) => {
      const b = request.body;
      // A quote for a machine reads its record at the registry: that needs a caller (anyone may price figures).
      // An API key quotes with the scope offers (or read: not a GET here, so offers).
      if (b.provider_id && ctx.providers) assertScope(await authenticate(request), 'offers');
      const resources = await quotedResources(
        ctx,
        b.provider_id,
        {
          gpuModel: b.gpu_model,
          gpuCount: b.gpu_count,
          requestedVramMb: b.requested_vram_mb,
          estimatedPowerW: b.estimated_power_w,
        },
        request.correlationId,
      );
      const rates = await ratesFor(ctx.db, ctx.pricing, { ...resources, providerId: b.provider_id });
      const q = quote(rates, b.duration_hours, ctx.scale);
      return {
        ...ratesJson(rates, ctx.scale),
        provider_id: b.provider_id ?? null,
        gpu_count: resources.gpuCount,
        requested_vram_mb: resources.requestedVramMb,
        estimated_power_w: resources.estimatedPowerW,
        duration_hours: b.duration_hours.toFixed(),
        total_cost: q.totalCost.toFixed(ctx.scale),
        platform_fee: q.platformFee.toFixed(ctx.scale),
        provider_earnings: q.providerEarnings.toFixed(ctx.scale),
      };
    },
  );

  app.get(
    '/api/v1/pricing/rates',
    {
      config: { public: true },
      schema: {
        tags: ['pricing'],
        operationId: 'getPlatformRates',
        summary:
          "The platform's base hourly rates per GPU model, VRAM and power rates, factors and fee, and its storage rate",
        response: {
          200: platformRatesSchema,
        },
      },
    },
    async () => {
      const { card, market, platformFeePercent } = ctx.pricing;
      const fmt = (v: string) => formatRate(new Dec(v), ctx.scale);
      return {
        base_rates: Object.fromEntries(Object.entries(card.baseRates).map(([k, v]) => [k, fmt(v)])),
        default_rate: fmt(card.baseRates.default ?? '0'),
        vram_rate_per_gb_hour: fmt(card.vramRatePerGbHour),
        power_rate_per_watt_hour: fmt(card.powerRatePerWattHour),
        demand_multiplier: new Dec(await market.demandMultiplier({ gpuModel: 'default' })).toFixed(),
        supply_factor: new Dec(await market.supplyFactor({ gpuModel: 'default' })).toFixed(),
        platform_fee_percent: new Dec(platformFeePercent).toFixed(),
        storage_rate_per_gb_hour: fmt(ctx.pricing.storageRatePerGbHour),
      };
    },
  );

  app.get(
    '/api/v1/provider/:providerID/rates',
    {
      // What a provider charges is public, like the platform's rates (POST /pricing/calculate applies it anyway).
      config: { public: true, openapi: { headers: { 200: ['ETag'] } } },
      schema: {
        tags: ['providers'],
        operationId: 'getProviderRates',
        summary: "A provider's own rates (empty base_rates and nulls: the platform's rates apply)",
        description:
          '`ETag` names the rates as they are: send it back as `If-Match` with `PUT` to change them only if no one ' +
          'changed them since.',
        params: providerParams,
        response: { 200: providerRatesSchema, ...problems(400) },
      },
    },
    async (request, reply) => {
      const stored = await findProviderRates(ctx.db, request.params.providerID);
      reply.header('etag', ratesEtag(stored));
      return providerRatesJson(request.params.providerID, stored);
    },
  );

  app.put(
    '/api/v1/provider/:providerID/rates',
    {
      config: {
        scope: 'machines',
        roles: PROVIDER_ROLES,
        openapi: { headers: { 200: ['ETag'] } },
        audit: {
          action: 'rates_changed',
          body: ['base_rates', 'vram_rate_per_gb_hour', 'power_rate_per_watt_hour', 'bid_floor'],
        },
      },
      schema: {
        tags: ['providers'],
        operationId: 'setProviderRates',
        summary: "Replace a provider's rates; they price its sessions started from now on",
        description:
          'Model names are normalised (lowercase, spaces to "-"); two names that normalise alike are a 400. Base ' +
          'rates must be above 0; VRAM and power rates may be 0 or null (null: the platform rate). Running ' +
          "sessions keep the rates they started with. Only the machine's owner (per the provider registry), an " +
          'admin or a service sets them: 403 NOT_PROVIDER_OWNER, 404 PROVIDER_NOT_FOUND when the registry does not ' +
          'know the machine, 503 PROVIDER_REGISTRY_UNAVAILABLE. With `If-Match` (the `ETag` a read answered), only ' +
          'if they are still as read: else 412 RATES_CHANGED and nothing changes (a read, changed and written back ' +
          'never undoes a change made in between). The answer carries the new `ETag`.',
        params: providerParams,
        headers: z.object({
          'if-match': ifMatchHeader("the rates' ETag as read (or `*`): change them only if they are still so"),
        }),
        body: providerRatesBody,
        response: { 200: providerRatesSchema, ...problems(400, 403, 404, 412, 503) },
      },
    },
    async (request, reply) => {
      const bodyProvider = request.body.provider_id;
      if (bodyProvider !== undefined && bodyProvider !== request.params.providerID) {
        const message = `provider_id ${bodyProvider} is not the provider of the path`;
        throw errors.validation(message, [{ path: 'body.provider_id', message }]);
      }
      const baseRates: Record<string, string> = {};
      for (const [model, rate] of Object.entries(request.body.base_rates)) {
        const key = normalizeModel(model);
        if (!key || Object.hasOwn(baseRates, key)) {
          const message = key ? `"${model}" names the same model as another entry (${key})` : 'empty model name';
          throw errors.validation(message, [{ path: `body.base_rates.${model}`, message }]);
        }
        baseRates[key] = rate;
      }
      const stored = await setProviderRates(
        ctx,
        callerOf(request),
        request.params.providerID,
        {
          baseRates,
          vramRatePerGbHour: request.body.vram_rate_per_gb_hour,
          powerRatePerWattHour: request.body.power_rate_per_watt_hour,
          bidFloor: request.body.bid_floor,
        },
        { correlationId: request.correlationId, ifMatch: request.headers['if-match'] },
      );
      reply.header('etag', ratesEtag(stored));
      return providerRatesJson(request.params.providerID, stored);
    },
  );
}
