/**
 * The market's endpoint: `GET /offers` (renters search with their own token; the public fields only). Billing's prices
 * arrive as its messages (`POST /messages` without NATS, its events with NATS: adapters/billing-messages.ts). Rules
 * live in `domain/market.ts` and `domain/offers.ts`.
 */
import {
  type App,
  gpuModelKey,
  invalidCursor,
  PAGE_HEADERS,
  pageQuery,
  problemSchema,
  queryInteger,
  setNextPage,
} from '@gpu/common';
import type { FastifyPluginAsync } from 'fastify';
import { z } from 'zod';
import type { OfferRow } from '../db/offer-repository.ts';
import { RELIABILITY_ROLES } from '../domain/access.ts';
import type { Market } from '../domain/market.ts';
import {
  OFFER_SORTS,
  type OfferCursor,
  offerCursorOf,
  offerCursorText,
  VERSION_PATTERN,
  VRAM_PRICE_SCALE,
} from '../domain/offers.ts';
import { DISK_MB_MAX, schemas, text } from './schemas.ts';

export interface OfferRoutesOptions {
  market: Market;
}

const errorsOf = (...codes: number[]) => Object.fromEntries(codes.map((c) => [c, problemSchema]));

const version = (what: string) =>
  z
    .string()
    .max(32)
    .regex(VERSION_PATTERN, 'expected dotted numbers, e.g. 535.104 or 8.0')
    .optional()
    .describe(`at least this ${what}, compared part by part`);

/** A price per GPU-hour a renter asks at most (tokens, a non-negative decimal: any amount billing takes). */
const priceAtMost = (what: string) =>
  z
    .string()
    .max(61)
    .regex(/^\d{1,30}(\.\d{1,30})?$/, 'expected a non-negative decimal')
    .optional()
    .describe(what);

const offerQuerySchema = z.object({
  max_price: priceAtMost('at most this price per GPU-hour (tokens)'),
  max_bid: priceAtMost(
    'machines that take bids, with a bid floor per GPU-hour at most this (tokens): with the default `availability`, ' +
      'the groups where a bid of this wins a free GPU now',
  ),
  min_free_gpus: queryInteger(1, 1024).optional().describe('at least this many free GPUs'),
  min_gpus: queryInteger(1, 1024).optional().describe('at least this many GPUs in the group, free or not'),
  availability: z
    .enum(['free', 'any'])
    .default('free')
    .describe(
      '`free` (the market now: groups with GPUs free); `any`: every priced group of every registered machine, busy, ' +
        'held or offline included (what could ever be rented: a scheduler asking whether terms can be met at all)',
    ),
  gpu_model: text(128)
    .optional()
    .describe("a GPU model, as billing names it (`H100` finds `NVIDIA H100 80GB HBM3`: billing's model key)"),
  min_vram: queryInteger(0, Number.MAX_SAFE_INTEGER)
    .optional()
    .describe('every GPU of the offer has at least this VRAM (MB)'),
  architecture: text(64).optional().describe('GPU architecture, case-insensitive'),
  min_reliability: z.coerce.number().min(0).max(1).optional().describe('at least this reliability score (0-1)'),
  min_driver_version: version('driver version'),
  min_compute_capability: version('CUDA compute capability'),
  region: text(256).optional().describe("the machine's location, case-insensitive"),
  min_disk: queryInteger(0, DISK_MB_MAX)
    .optional()
    .describe('each workload gets at least this disk (MB); machines that do not state theirs are left out'),
  sort: z
    .enum(OFFER_SORTS)
    .default('price')
    .describe(
      '`price` (per GPU-hour, cheapest first), `-price`, `vram_price` (per GB of VRAM-hour, cheapest first), ' +
        '`-vram_price`, `-reliability` (most reliable first), `reliability`, `bid_floor` (the machines that take ' +
        'bids only, lowest floor first), `-bid_floor`',
    ),
  ...pageQuery,
});

const rateSource = z
  .enum(['provider', 'platform'])
  .describe("`provider`: the machine's own rate; `platform`: billing's");

const pricePartsSchema = z
  .object({
    base: z.string().describe("the model's base rate per GPU-hour"),
    base_source: rateSource,
    vram: z.string().describe('the VRAM part of a GPU-hour: `vram_gb` × `vram_rate_per_gb_hour`'),
    vram_gb: z.string().describe("the group's healthy GPUs' average VRAM in GB (shown to 3 decimals)"),
    vram_rate_per_gb_hour: z.string(),
    vram_rate_source: rateSource,
    power: z
      .string()
      .describe('the power part: `power_w` × `power_rate_per_watt_hour` (0 unless every GPU reports its power)'),
    power_w: z.string().describe("the healthy GPUs' average power in W (shown to 3 decimals)"),
    power_rate_per_watt_hour: z.string(),
    power_rate_source: rateSource,
    demand_multiplier: z.string(),
    supply_factor: z.string(),
  })
  .describe(
    "An offer's price explained: (base + vram + power) × demand_multiplier × supply_factor = price_per_gpu_hour, " +
      'the formula billing charges by (the parts as the price adds them up; `vram_gb` and `power_w` as shown are ' +
      'rounded)',
  )
  .register(schemas, { id: 'OfferPriceParts' });

const offerSchema = z
  .object({
    provider_id: z.uuid().describe('the machine (its reliability: GET /providers/{id}/reliability)'),
    model_key: z.string().describe("billing's model key: what prices the group, and what a rental of it takes"),
    gpu_model: z.string().describe("as the driver names the group's first GPU"),
    model_names: z.array(z.string()).describe("every name of the group's GPUs (`H100 80GB HBM3`, `H100 PCIe`)"),
    gpu_count: z.number().int().describe("the machine's GPUs of this model key"),
    free_gpus: z
      .number()
      .int()
      .describe(
        'healthy GPUs of the group that no running session holds (listed only while the machine is idle and they ' +
          'are at least `min_gpus_per_rental`)',
      ),
    min_gpus_per_rental: z
      .number()
      .int()
      .describe("the smallest group of GPUs a rental may take on the machine (its owner's setting)"),
    vram_mb: z.number().int().describe('the smallest VRAM of its healthy GPUs'),
    architecture: z.string().nullable(),
    driver_version: z.string(),
    compute_capability: z.string().nullable().describe('CUDA compute capability'),
    region: z.string().nullable().describe("the machine's location"),
    disk_mb: z
      .number()
      .int()
      .nullable()
      .describe('the disk each workload on the machine gets (MB: its work directory and /tmp); null: not stated'),
    price_per_gpu_hour: z
      .string()
      .describe(
        "tokens per GPU-hour as billing charges it now (the machine's own rates, else the platform's; power only " +
          'when every GPU reports it, else a renter pays the power it declares on top)',
      ),
    price_per_vram_gb_hour: z
      .string()
      .describe(
        `the price per GPU-hour over the GPUs' smallest VRAM in GB: tokens per GB of VRAM-hour (${VRAM_PRICE_SCALE} ` +
          'decimals at most), what `sort=vram_price` orders by',
      ),
    price_parts: pricePartsSchema
      .nullable()
      .describe('what `price_per_gpu_hour` is made of, from the rates held now (null: billing said no prices yet)'),
    interruptible: z
      .object({
        bid_floor: z.string().describe('the lowest bid per GPU-hour the machine takes'),
        gpus: z
          .number()
          .int()
          .describe(
            'GPUs of the group an interruptible rental could get now: free ones, and those lower bids hold (a higher ' +
              'bid takes them back); 0 while the machine is not up',
          ),
        winning_bid: z
          .string()
          .nullable()
          .describe('the floor while a GPU of the group is free: a bid of it wins one now; null: none is free'),
        outbid_above: z
          .string()
          .nullable()
          .describe(
            'the lowest bid per GPU-hour holding a GPU of the group: a bid above it (and at least the floor) takes ' +
              "that session's GPUs back; null: none is held at a bid (or the machine is not up)",
          ),
      })
      .nullable()
      .describe(
        'renting at a bid (POST /billing/start-session with `bid`: cheaper, taken back with notice for on-demand ' +
          'rentals and higher bids); null: the machine takes no bids',
      ),
    reliability: z.object({
      score: z.number().min(0).max(1).describe('uptime × session success, 1 while unobserved'),
      uptime_30d: z.number().min(0).max(1).nullable(),
      observed_hours_30d: z.number().min(0),
      sessions_ended: z.number().int(),
      sessions_failed: z.number().int(),
    }),
  })
  .describe('A group of GPUs on the market: what a renter may rent, and its price')
  .register(schemas, { id: 'Offer' });

const offerListSchema = z.array(offerSchema).register(schemas, { id: 'OfferList' });

function offerJson(o: OfferRow): z.input<typeof offerSchema> {
  return {
    provider_id: o.provider_id,
    model_key: o.model_key,
    gpu_model: o.gpu_model,
    model_names: o.model_names,
    gpu_count: o.gpu_count,
    free_gpus: o.free_gpus,
    min_gpus_per_rental: o.min_gpus_per_rental,
    vram_mb: Number(o.vram_mb),
    architecture: o.architecture,
    driver_version: o.driver_version,
    compute_capability: o.compute_capability,
    region: o.region,
    disk_mb: o.disk_mb,
    price_per_gpu_hour: o.price_per_gpu_hour ?? '0',
    price_per_vram_gb_hour: o.price_per_vram_gb_hour ?? '0',
    price_parts: o.price_parts,
    interruptible: o.interruptible,
    reliability: {
      score: Number(o.reliability),
      uptime_30d: o.uptime_30d === null ? null : Number(o.uptime_30d),
      observed_hours_30d: Number(o.observed_seconds_30d) / 3600,
      sessions_ended: o.sessions_ended,
      sessions_failed: o.sessions_failed,
    },
  };
}

export const offerRoutes: FastifyPluginAsync<OfferRoutesOptions> = async (fastify, opts) => {
  const app = fastify as unknown as App;
  const { market } = opts;

  app.get(
    '/offers',
    {
      config: { roles: RELIABILITY_ROLES, scope: 'offers', openapi: { headers: { 200: PAGE_HEADERS } } },
      schema: {
        tags: ['offers'],
        operationId: 'searchOffers',
        summary: 'Search the market: free GPUs of idle machines, priced and scored',
        description:
          'Anyone with a token, renters included: an offer names the machine, its GPUs, region, price and reliability, ' +
          "never the owner or the address. Prices are billing's (from its price events: a quote for the machine " +
          'and these GPUs costs the same); offers without a price yet are not listed. Keyset paging: ' +
          '`X-Next-Cursor` and `Link` while more follow; 400 INVALID_CURSOR for a cursor not from this search.',
        querystring: offerQuerySchema,
        response: { 200: offerListSchema, ...errorsOf(400, 401, 403, 503) },
      },
    },
    async (request, reply) => {
      const { cursor, gpu_model, ...query } = request.query;
      let after: OfferCursor | undefined;
      if (cursor !== undefined) {
        const parsed = offerCursorOf(cursor, query.sort);
        if (typeof parsed === 'string') throw invalidCursor(parsed);
        after = parsed;
      }
      const page = await market.search({
        ...query,
        ...(gpu_model !== undefined ? { gpu_model: gpuModelKey(gpu_model) } : {}),
        after,
      });
      setNextPage(request, reply, page.next && offerCursorText(page.next));
      return page.items.map(offerJson);
    },
  );
};
