/**
 * How `gpu` shows what the platform answers in its tables: token amounts and rates to the token's six decimals,
 * scores to two, durations in words, times to the second. Only what is shown: `--json` prints the platform's own
 * exact strings. Decimal strings are read with decimal.js, never as JS numbers.
 */
import { Decimal } from 'decimal.js';

/** The platform token's decimals (billing's `blockchain.token_decimals`, 6 as shipped): every amount has at most so many. */
const TOKEN_DECIMALS = 6;

const Dec = Decimal.clone({ precision: 80, rounding: Decimal.ROUND_HALF_EVEN });

/**
 * A token amount or rate as shown: six decimals (`4.5` → `4.500000`); a rate with more (a quotient: `5.2930859375`)
 * rounded half-even as billing rounds amounts. Empty for none; a value that is not a decimal, as it came.
 */
export function tokens(value: string | null | undefined): string {
  if (value === null || value === undefined || value === '') return '';
  try {
    return new Dec(value).toFixed(TOKEN_DECIMALS);
  } catch {
    return value;
  }
}

/** A token amount as `tokens` shows it, empty when it is zero (a column where most rows owe nothing). */
export function tokensIfAny(value: string): string {
  return new Dec(value).isZero() ? '' : tokens(value);
}

/** A reliability score (0-1) to two decimals. */
export function score(value: number | null | undefined): string {
  return value === null || value === undefined ? '' : value.toFixed(2);
}

/**
 * The platform's part of a payment, as billing records it (`fee` is part of `amount`, never added to it): `0.000417
 * (5%)`, `all of it` for a payment that is the platform's alone (storage), nothing where it took none.
 */
export function feeShare(amount: string, fee: string): string {
  const paid = new Dec(amount);
  const part = new Dec(fee);
  if (part.isZero()) return '';
  if (part.eq(paid)) return `${tokens(fee)} (all of it)`;
  const percent = paid.isZero() ? '' : ` (${part.div(paid).mul(100).toDecimalPlaces(1).toFixed()}%)`;
  return `${tokens(fee)}${percent}`;
}

/** A length of time in words, to the minute from a minute on: `42 s`, `12 min`, `2 h 05 min`, `3 d 04 h`. */
export function duration(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s} s`;
  const min = Math.floor(s / 60);
  if (min < 60) return `${min} min`;
  const h = Math.floor(min / 60);
  if (h < 24) return `${h} h ${String(min % 60).padStart(2, '0')} min`;
  return `${Math.floor(h / 24)} d ${String(h % 24).padStart(2, '0')} h`;
}

/** A time the platform answered (RFC 3339), to the second: `2025-05-01T10:02:03Z`. Empty for none. */
export function time(value: string | null | undefined): string {
  if (!value) return '';
  const d = new Date(value);
  return Number.isNaN(d.getTime()) ? value : `${d.toISOString().slice(0, 19)}Z`;
}

/** Megabytes (of VRAM, of disk) in GB as the platform counts them (1024 MB): `81559` → `79.6 GB`. */
export function gigabytes(mb: number): string {
  return `${(mb / 1024).toFixed(1)} GB`;
}

const BYTE_UNITS = ['KB', 'MB', 'GB', 'TB', 'PB'];

/** A byte count as the platform counts sizes (1024 a step, as GB-hours are of 2^30 bytes): `1536` → `1.5 KB`. */
export function bytes(n: number): string {
  if (n < 1024) return `${n} B`;
  let value = n / 1024;
  let unit = 0;
  while (value >= 1024 && unit < BYTE_UNITS.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(1)} ${BYTE_UNITS[unit]}`;
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is escaped
const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g;

/**
 * Text of the platform's (a problem's detail, an object's key, a table's cell) as a terminal may show it: control
 * characters but line breaks and tabs written as `\u001b` (an escape sequence in a key or a detail could retitle the
 * window, or write the clipboard, OSC 52).
 */
export function printable(text: string): string {
  return text.replace(CONTROL, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}
