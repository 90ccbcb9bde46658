/**
 * Exact token amounts. Every amount is a decimal.js value in code, a NUMERIC
 * with the token's decimals as scale in PostgreSQL and a decimal string in
 * JSON. The rounding rule (README "Rounding"):
 *  - amounts a client sends must already fit the scale: more fractional digits
 *    than the token has is refused (invalid), never silently rounded;
 *  - amounts the service derives (a fee from a percentage, a per-minute cost)
 *    are rounded once, where they are derived, to the scale with
 *    round-half-even (banker's rounding);
 *  - a split (fee and provider share of a cost) rounds one part and gives the
 *    other the exact remainder, so the parts always sum to the whole.
 */
import { Decimal } from 'decimal.js';

/** A private decimal.js constructor: 60 significant digits, never exponent notation in strings. */
export const Dec = Decimal.clone({ precision: 60, rounding: Decimal.ROUND_HALF_EVEN, toExpNeg: -60, toExpPos: 60 });
export type Dec = InstanceType<typeof Dec>;

const DECIMAL_RE = /^(0|[1-9]\d{0,29})(\.\d+)?$/;

export class AmountFormatError extends Error {}

/**
 * Parses a client-supplied non-negative amount with at most `scale`
 * fractional digits. Throws AmountFormatError with a readable reason.
 */
export function parseAmount(input: string, scale: number): Dec {
  const s = input.trim();
  if (!DECIMAL_RE.test(s)) throw new AmountFormatError(`"${input}" is not a decimal amount like "12.5"`);
  const frac = s.split('.')[1] ?? '';
  if (frac.length > scale) {
    throw new AmountFormatError(`"${input}" has ${frac.length} decimal places; the token has ${scale}`);
  }
  return new Dec(s);
}

/** Rounds a derived amount to the scale with round-half-even. */
export function roundAmount(value: Dec, scale: number): Dec {
  return value.toDecimalPlaces(scale, Dec.ROUND_HALF_EVEN);
}

/** The canonical decimal string of an amount at the scale ("1.500000" for scale 6). */
export function formatAmount(value: Dec | string, scale: number): string {
  return new Dec(value).toFixed(scale);
}

/** Splits `total` into a fee of `percent` % (rounded half-even) and the exact remainder. */
export function splitFee(total: Dec, percent: Dec, scale: number): { fee: Dec; rest: Dec } {
  const fee = roundAmount(total.mul(percent).div(100), scale);
  return { fee, rest: total.minus(fee) };
}
