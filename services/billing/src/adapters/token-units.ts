/**
 * Exact conversion between token amounts as decimal strings in whole tokens
 * ("12.5") and the chain's integer base units (bigint), for a mint's decimals.
 */
import { Decimal } from 'decimal.js';

// Enough significant digits for any u64 amount at any scale: no rounding ever happens here.
const Exact = Decimal.clone({ precision: 80, toExpNeg: -100, toExpPos: 100 });

/**
 * Base units of `amount` tokens. Throws a RangeError when the amount is not a
 * finite, non-negative decimal or has more fractional digits than `decimals`
 * (the caller rounds first, by its own rule; this never rounds).
 */
export function toBaseUnits(amount: string, decimals: number): bigint {
  let d: Decimal;
  try {
    d = new Exact(amount.trim());
  } catch {
    throw new RangeError(`invalid token amount "${amount}"`);
  }
  if (!d.isFinite() || d.isNegative()) throw new RangeError(`invalid token amount "${amount}"`);
  const scaled = d.mul(new Exact(10).pow(decimals));
  if (!scaled.isInteger()) throw new RangeError(`amount ${amount} has more than ${decimals} decimal places`);
  return BigInt(scaled.toFixed(0));
}

/** `units` base units as a decimal string in whole tokens, without trailing zeros ("12.5", "0", "100"). */
export function fromBaseUnits(units: bigint, decimals: number): string {
  const negative = units < 0n;
  const digits = (negative ? -units : units).toString().padStart(decimals + 1, '0');
  const whole = decimals === 0 ? digits : digits.slice(0, -decimals);
  const frac = decimals === 0 ? '' : digits.slice(-decimals).replace(/0+$/, '');
  return `${negative ? '-' : ''}${whole}${frac ? `.${frac}` : ''}`;
}
