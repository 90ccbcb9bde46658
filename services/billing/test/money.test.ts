import { describe, expect, it } from 'vitest';
import {
  AmountFormatError,
  Dec,
  formatAmount,
  parseAmount,
  roundAmount,
  splitFee,
} from '../src/domain/ledger/money.ts';

describe('money: the rounding rule', () => {
  it('accepts client amounts that fit the scale and refuses more precision instead of rounding', () => {
    expect(parseAmount('12.345678', 6).toFixed()).toBe('12.345678');
    expect(parseAmount('0.1', 6).plus(parseAmount('0.2', 6)).toFixed()).toBe('0.3');
    expect(() => parseAmount('1.0000001', 6)).toThrow(AmountFormatError);
    expect(() => parseAmount('1e3', 6)).toThrow(AmountFormatError);
    expect(() => parseAmount('-1', 6)).toThrow(AmountFormatError);
    expect(() => parseAmount('01.5', 6)).toThrow(AmountFormatError);
    expect(() => parseAmount('1.', 6)).toThrow(AmountFormatError);
  });

  it('rounds derived amounts half-even at the scale', () => {
    expect(roundAmount(new Dec('0.0000125'), 6).toFixed()).toBe('0.000012');
    expect(roundAmount(new Dec('0.0000135'), 6).toFixed()).toBe('0.000014');
    expect(roundAmount(new Dec('0.00001251'), 6).toFixed()).toBe('0.000013');
    expect(roundAmount(new Dec('2.5'), 0).toFixed()).toBe('2');
    expect(roundAmount(new Dec('3.5'), 0).toFixed()).toBe('4');
  });

  it('splits a fee so that the parts always sum to the whole', () => {
    const { fee, rest } = splitFee(new Dec('0.000250'), new Dec('5'), 6);
    expect(fee.toFixed()).toBe('0.000012'); // 0.0000125 -> half-even -> 0.000012
    expect(rest.toFixed()).toBe('0.000238');
    for (const total of ['1', '0.000001', '123.456789', '0.333333', '7.000005']) {
      const s = splitFee(new Dec(total), new Dec('5'), 6);
      expect(s.fee.plus(s.rest).eq(total)).toBe(true);
      expect(s.fee.decimalPlaces()).toBeLessThanOrEqual(6);
    }
  });

  it('formats amounts as fixed-scale decimal strings, never in exponent notation', () => {
    expect(formatAmount('1', 6)).toBe('1.000000');
    expect(formatAmount(new Dec('1e-6'), 6)).toBe('0.000001');
    expect(formatAmount(new Dec('123456789012345678901234567890'), 2)).toBe('123456789012345678901234567890.00');
  });
});
