/**
 * The price of GPU time, stated once. Billing owns prices and charges by this formula in exact decimals; the
 * provider registry keeps every offer's price per GPU-hour in its database by the same formula rendered to SQL
 * (its `offer_price` function), so what a renter searches is what billing quotes:
 *
 *   base  = base rate of the model key × GPUs
 *   vram  = VRAM in MiB / 1024 × VRAM rate per GB-hour
 *   power = power in W × power rate per watt-hour
 *   total = (base + vram + power) × demand × supply
 *
 * A rate is looked up in `RATE_LOOKUP` order: the machine's own table before the platform's, within each the model
 * key before `default`; a VRAM or power rate is the machine's own when it set one, else the platform's; a factor is
 * the model key's, else `default`'s, else 1. The arithmetic is a parameter: billing passes decimal.js, the registry a
 * renderer of SQL expressions.
 */

/** The four operations the formula uses, over numbers of some kind (decimals, SQL expressions). */
export interface PriceArithmetic<T> {
  add(a: T, b: T): T;
  mul(a: T, b: T): T;
  div(a: T, b: T): T;
  /** A constant written as a decimal string. */
  constant(value: string): T;
}

/** What a price is made of, for `gpus` GPUs of one model key on one machine. */
export interface PriceTerms<T> {
  baseRatePerGpu: T;
  gpus: T;
  vramMb: T;
  vramRatePerGbHour: T;
  powerW: T;
  powerRatePerWattHour: T;
  demand: T;
  supply: T;
}

/** An hourly price and its parts. */
export interface HourlyPrice<T> {
  base: T;
  vram: T;
  power: T;
  total: T;
}

/** The hourly price of `terms`, in `a`'s arithmetic. */
export function hourlyPrice<T>(a: PriceArithmetic<T>, terms: PriceTerms<T>): HourlyPrice<T> {
  const base = a.mul(terms.baseRatePerGpu, terms.gpus);
  const vram = a.mul(a.div(terms.vramMb, a.constant('1024')), terms.vramRatePerGbHour);
  const power = a.mul(terms.powerW, terms.powerRatePerWattHour);
  const total = a.mul(a.mul(a.add(a.add(base, vram), power), terms.demand), terms.supply);
  return { base, vram, power, total };
}

/** Where a base rate is looked up, in order; the first entry that exists prices the model, else `0`. */
export const RATE_LOOKUP = [
  { table: 'provider', key: 'model' },
  { table: 'provider', key: 'default' },
  { table: 'platform', key: 'model' },
  { table: 'platform', key: 'default' },
] as const;

/** A factor (demand, supply) where none is set. */
export const NEUTRAL_FACTOR = '1';

/** A base rate where no table has one. */
export const UNPRICED_RATE = '0';

/** SQL arithmetic over numeric expressions, for rendering `hourlyPrice` into a statement or a function body. */
export const sqlPriceArithmetic: PriceArithmetic<string> = {
  add: (a, b) => `(${a} + ${b})`,
  mul: (a, b) => `(${a} * ${b})`,
  div: (a, b) => `(${a} / ${b})`,
  constant: (value) => {
    if (!/^\d+(\.\d+)?$/.test(value)) throw new Error(`not a decimal constant: ${value}`);
    return `${value}::numeric`;
  },
};
