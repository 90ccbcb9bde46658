/**
 * Offers: the market renters search. A machine offers each group of its GPUs of one model (what a rental takes) while
 * it is `idle` and the group has at least the machine's `min_gpus_per_rental` free GPUs (healthy, and held by no
 * running session): its free GPUs, what they are (model, VRAM, architecture, driver,
 * compute capability), where (the machine's `location`, its region), the disk each workload gets, its price per GPU-hour as billing charges it
 * today (learnt from billing's price events: the machine's own rates or the platform's), and its reliability. Never
 * the owner, host name or address.
 *
 * Search: filters on price, bid floor, free GPUs, model, VRAM, architecture, reliability, driver and compute
 * capability (versions compared part by part: `550.54` < `550.100`), region, disk; sorted by price (cheapest first, or
 * dearest), by price per GB of VRAM (`vram_price`: the price per GPU-hour over the GPUs' smallest VRAM, cheapest first,
 * or dearest), by reliability (most reliable first, or least) or by bid floor (`bid_floor`: the machines that take bids
 * only, lowest floor first, or highest); keyset paging (the sort value, then the machine and model).
 */
import { decodeCursor, encodeCursor, gpuModelKey } from '@gpu/common';
import type { GpuInput } from './gpu-fields.ts';

export const OFFER_SORTS = [
  'price',
  '-price',
  'vram_price',
  '-vram_price',
  'reliability',
  '-reliability',
  'bid_floor',
  '-bid_floor',
] as const;
export type OfferSort = (typeof OFFER_SORTS)[number];
export type OfferSortKey = 'price' | 'vram_price' | 'reliability' | 'bid_floor';

/** Decimals of an offer's price per GB of VRAM (a quotient: its value, its sort and its cursor are all rounded so). */
export const VRAM_PRICE_SCALE = 9;

export interface OfferFilter {
  max_price?: string;
  /** Machines that take bids, with a bid floor at most this (per GPU-hour). */
  max_bid?: string;
  min_free_gpus?: number;
  /** At least this many GPUs in the group, free or not. */
  min_gpus?: number;
  /** `any`: groups with no GPU free now too (busy, held or offline machines). */
  availability?: 'free' | 'any';
  gpu_model?: string;
  min_vram?: number;
  architecture?: string;
  min_reliability?: number;
  min_driver_version?: string;
  min_compute_capability?: string;
  region?: string;
  min_disk?: number;
  sort: OfferSort;
  limit: number;
  after?: OfferCursor;
}

/** Where a page ended: the sort value of its last offer (exact, as text). */
export interface OfferCursor {
  sort: OfferSort;
  value: string;
  providerId: string;
  modelKey: string;
}

/**
 * A group of a machine's GPUs of one model key, as an offer lists it: what a rental takes and billing prices. The
 * database works out the rest from the GPUs themselves (their health, VRAM and power: `offers_refresh_gpus`).
 */
export interface OfferGroup {
  /** Billing's model key (`nvidia-tesla-h100`). */
  modelKey: string;
  /** The name of the group's first GPU, as its driver prints it (what the offer shows). */
  gpuModel: string;
  /** Every name of the group's GPUs (`NVIDIA H100 80GB HBM3`, `NVIDIA H100 PCIe`). */
  modelNames: string[];
  gpuCount: number;
  architecture: string | null;
  driverVersion: string;
  computeCapability: string | null;
}

/** A version as dotted numbers (`550.54.14`, `8.0`): each part 1-9 digits. The offers' filters take only this. */
export const VERSION_PATTERN = /^\d{1,9}(?:\.\d{1,9})*$/;

/** Dotted version numbers as parts (`550.54.14` → [550, 54, 14]); null when a part is not a number. */
export function versionParts(version: string | null | undefined): number[] | null {
  if (!version || !VERSION_PATTERN.test(version)) return null;
  return version.split('.').map(Number);
}

/** A machine's GPUs grouped by model key, as offers: in the order of their first GPU. */
export function offerGroups(gpus: readonly GpuInput[]): OfferGroup[] {
  const groups = new Map<string, GpuInput[]>();
  for (const g of gpus) {
    const key = gpuModelKey(g.model_name);
    const list = groups.get(key);
    if (list) list.push(g);
    else groups.set(key, [g]);
  }
  return [...groups].map(([modelKey, list]) => ({
    modelKey,
    gpuModel: list[0]!.model_name,
    modelNames: [...new Set(list.map((g) => g.model_name))],
    gpuCount: list.length,
    architecture: list.find((g) => g.architecture)?.architecture ?? null,
    driverVersion: list[0]!.driver_version,
    computeCapability: list.find((g) => g.compute_capability)?.compute_capability ?? null,
  }));
}

/** A sort key and direction. */
export function offerSortOf(sort: OfferSort): { key: OfferSortKey; descending: boolean } {
  const descending = sort.startsWith('-');
  return { key: (descending ? sort.slice(1) : sort) as OfferSortKey, descending };
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const DECIMAL = /^\d{1,30}(\.\d{1,100})?$/;
/** A reliability as PostgreSQL prints a float8 between 0 and 1 (`0.8`, `1`, `3.2e-05`). */
const isScore = (v: string) => {
  if (!/^[0-9.e+-]{1,32}$/.test(v)) return false;
  const n = Number(v);
  // Zero written as zero, or a float8 PostgreSQL reads (`1e-400` is below its range: a 500 otherwise).
  return Number.isFinite(n) && n <= 1 && (n >= 1e-300 || /^0(\.0+)?$/.test(v));
};

export function offerCursorText(c: OfferCursor): string {
  return encodeCursor([c.sort, c.value, c.providerId, c.modelKey]);
}

/** The cursor in `text`, made for `sort`; or why it is not one (400 INVALID_CURSOR). */
export function offerCursorOf(text: string, sort: OfferSort): OfferCursor | string {
  const values = decodeCursor(text, 4);
  const bad = 'not a cursor returned by this service';
  if (!values) return bad;
  const [cursorSort, value, providerId, modelKey] = values as [unknown, unknown, unknown, unknown];
  if (cursorSort !== sort) return `the cursor was made for sort=${String(cursorSort)}, not sort=${sort}`;
  if (typeof providerId !== 'string' || !UUID.test(providerId)) return bad;
  if (typeof modelKey !== 'string' || modelKey.length > 256) return bad;
  if (typeof value !== 'string') return bad;
  const { key } = offerSortOf(sort);
  if (!(key === 'reliability' ? isScore(value) : DECIMAL.test(value))) return bad;
  return { sort, value, providerId, modelKey };
}
