/** Exact token amount conversion and base58, the adapter's pure helpers. */
import { describe, expect, it } from 'vitest';
import { fromBaseUnits, toBaseUnits } from '../src/adapters/token-units.ts';
import { base58Decode, base58Encode } from '../src/domain/chain/base58.ts';

describe('token units', () => {
  it('converts decimal strings to base units exactly, and back', () => {
    expect(toBaseUnits('12.5', 6)).toBe(12_500_000n);
    expect(toBaseUnits('0.000001', 6)).toBe(1n);
    expect(toBaseUnits('18446744073709.551615', 6)).toBe(18_446_744_073_709_551_615n); // u64 max, no rounding
    expect(toBaseUnits('7', 0)).toBe(7n);
    expect(fromBaseUnits(12_500_000n, 6)).toBe('12.5');
    expect(fromBaseUnits(0n, 6)).toBe('0');
    expect(fromBaseUnits(1n, 6)).toBe('0.000001');
    expect(fromBaseUnits(100_000_000n, 6)).toBe('100');
    expect(fromBaseUnits(18_446_744_073_709_551_615n, 6)).toBe('18446744073709.551615');
  });

  it('refuses more precision than the mint has, negatives and garbage instead of rounding', () => {
    expect(() => toBaseUnits('1.0000001', 6)).toThrow(RangeError);
    expect(() => toBaseUnits('-1', 6)).toThrow(RangeError);
    expect(() => toBaseUnits('abc', 6)).toThrow(RangeError);
    expect(() => toBaseUnits('Infinity', 6)).toThrow(RangeError);
  });
});

describe('base58', () => {
  it('round-trips bytes, leading zeros included', () => {
    const bytes = Uint8Array.from([0, 0, 1, 2, 255, 128, 7]);
    expect(base58Decode(base58Encode(bytes))).toEqual(bytes);
    expect(base58Encode(new Uint8Array(32))).toBe('11111111111111111111111111111111');
    expect(base58Decode('0OIl')).toBeNull();
  });
});
