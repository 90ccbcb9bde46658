/** The demo's reconciliation: exact, in base units; every mismatch a user would care about is a FAIL line. */
import { describe, expect, it } from 'vitest';
import { baseUnits, type RentalFigures, reconcile } from '../scripts/lib/demo-reconcile.ts';

// What a real demo run read back (one minute of 4 H100s at 200/GPU-hour plus VRAM and power, 5% fee).
const run: RentalFigures = {
  decimals: 6,
  totalCost: '13.486197',
  providerEarnings: '12.811887',
  platformFee: '0.674310',
  platformFeePercent: '5',
  payoutAmount: '12.811887',
  renterTotal: '886.513803',
  renterAvailable: '886.513803',
  deposited: '900.000000',
  renterReceived: '1000',
  renterAddressOnChain: '100',
  renterAddressPerBilling: '100.000000',
  payoutAddressOnChain: '12.811887',
  treasuryBefore: '1000000',
  treasuryAfter: '1000887.188113',
};
const failing = (f: RentalFigures) =>
  reconcile(f)
    .filter((c) => !c.ok)
    .map((c) => c.line);

describe('demo reconciliation', () => {
  it('holds for a rental whose figures add up', () => {
    const checks = reconcile(run);
    expect(checks).toHaveLength(7);
    expect(failing(run)).toEqual([]);
  });

  it('fails on one base unit too many or too few anywhere', () => {
    expect(failing({ ...run, providerEarnings: '12.811888', payoutAmount: '12.811888' })[0]).toMatch(
      /^renter paid 13.486197 = provider earned 12.811888/,
    );
    expect(failing({ ...run, payoutAmount: '12.811886', payoutAddressOnChain: '12.811886' })).toEqual([
      'paid out on chain 12.811886 = provider earned 12.811887',
      'treasury on chain 887.188113 since the deposit = deposited 900.000000 - paid out 12.811886',
    ]);
    expect(failing({ ...run, renterTotal: '886.513804', renterAvailable: '886.513804' })).toHaveLength(1);
    expect(failing({ ...run, renterAvailable: '886.000000' })).toHaveLength(1); // something still locked
    expect(failing({ ...run, renterAddressPerBilling: '99.999999' })).toHaveLength(1);
    expect(failing({ ...run, payoutAddressOnChain: '0' })).toHaveLength(1);
    expect(failing({ ...run, treasuryAfter: '1000887.188114' })).toHaveLength(1);
  });

  it('checks the fee is the percentage of the cost to the token unit', () => {
    // 5% of 13.486197 is 0.67430985: 0.674310 is right, 0.674309 is off by more than half a unit.
    expect(
      failing({ ...run, platformFee: '0.674309', providerEarnings: '12.811888', payoutAmount: '12.811888' }),
    ).toContain("platform fee 0.674309 = 5% of 13.486197, to the token's unit");
    expect(failing({ ...run, platformFeePercent: '2.5' })).toHaveLength(1);
  });

  it('reads amounts exactly', () => {
    expect(baseUnits('12.811887', 6)).toBe(12_811_887n);
    expect(baseUnits('100', 6)).toBe(100_000_000n);
    expect(baseUnits('-0.5', 6)).toBe(-500_000n);
    expect(baseUnits('1.2300000', 6)).toBe(1_230_000n);
    expect(() => baseUnits('1.0000001', 6)).toThrow();
    expect(() => baseUnits('1e6', 6)).toThrow();
  });
});
