/** The demo's reconciliation: exact, in base units; every mismatch a user would care about is a FAIL line. */
import { describe, expect, it } from 'vitest';
import { baseUnits, type MarketFigures, reconcile } from '../scripts/lib/demo-reconcile.ts';

// What a real demo run read back: one renter's minute of 4 H100s, another's session ended at its cap of 1.5, 5% fee,
// a storage charge, two payouts (the first created the payout address's token account: 0.5 withheld).
const run: MarketFigures = {
  decimals: 6,
  sessions: [
    { totalCost: '13.486197', providerEarnings: '12.811887', platformFee: '0.674310', platformFeePercent: '5' },
    { totalCost: '1.500000', providerEarnings: '1.425000', platformFee: '0.075000', platformFeePercent: '5' },
  ],
  renters: [
    {
      name: 'renter',
      total: '886.513801',
      available: '886.513801',
      deposited: '900.000000',
      sessionCosts: ['13.486197'],
      storageCharged: ['0.000001', '0.000001'],
      received: '1000',
      addressOnChain: '100',
      addressPerBilling: '100.000000',
    },
    {
      name: 'second renter',
      total: '48.500000',
      available: '48.500000',
      deposited: '50',
      sessionCosts: ['1.500000'],
      storageCharged: [],
      received: '60',
      addressOnChain: '10',
      addressPerBilling: '10',
    },
  ],
  payouts: ['1.425000', '12.811887'],
  payoutFees: ['0.500000', '0.000000'],
  payoutAddressOnChain: '13.736887',
  treasuryBefore: '1000000',
  treasuryAfter: '1000936.263113',
};
const failing = (f: MarketFigures) =>
  reconcile(f)
    .filter((c) => !c.ok)
    .map((c) => c.line);
const renter = (i: number, over: Partial<MarketFigures['renters'][number]>) =>
  run.renters.map((r, j) => (j === i ? { ...r, ...over } : r));

describe('demo reconciliation', () => {
  it('holds for a market whose figures add up', () => {
    const checks = reconcile(run);
    // Two lines per session, one for the payouts, two per renter, the payout address and the treasury.
    expect(checks).toHaveLength(2 * 2 + 1 + 2 * 2 + 2);
    expect(failing(run)).toEqual([]);
  });

  it('fails on one base unit too many or too few anywhere', () => {
    const [first, second] = run.sessions;
    expect(failing({ ...run, sessions: [{ ...first!, providerEarnings: '12.811888' }, second!] })).toEqual([
      'session 1: renter paid 13.486197 = provider earned 12.811888 + platform fee 0.674310',
      'paid out on chain 14.236887 = provider earned 14.236888',
    ]);
    expect(failing({ ...run, payouts: ['1.425000', '12.811886'], payoutAddressOnChain: '13.736886' })).toEqual([
      'paid out on chain 14.236886 = provider earned 14.236887',
      'treasury on chain 936.263113 since the first deposit = deposited 950.000000 - sent 13.736886',
    ]);
    // The fee withheld is the platform's: the address that got the whole amount, or a treasury that sent it, fails.
    expect(failing({ ...run, payoutAddressOnChain: '14.236887' })).toEqual([
      "provider's payout address on chain 14.236887 = paid out 14.236887 - token account fee 0.500000",
    ]);
    expect(failing({ ...run, treasuryAfter: '1000935.763113' })).toHaveLength(1);
    expect(failing({ ...run, payoutFees: ['0', '0'] })).toHaveLength(2);
    // A storage charge the wallet does not show, or one base unit still locked.
    expect(failing({ ...run, renters: renter(0, { storageCharged: ['0.000001'] }) })).toHaveLength(1);
    expect(failing({ ...run, renters: renter(1, { available: '48.499999' }) })).toHaveLength(1);
    expect(failing({ ...run, renters: renter(0, { addressPerBilling: '99.999999' }) })).toHaveLength(1);
    expect(failing({ ...run, payoutAddressOnChain: '0' })).toHaveLength(1);
    expect(failing({ ...run, treasuryAfter: '1000936.263114' })).toHaveLength(1);
  });

  it('checks the fee is the percentage of the cost to the token unit', () => {
    // 5% of 13.486197 is 0.67430985: 0.674310 is right, 0.674309 is off by more than half a unit.
    const [first, second] = run.sessions;
    const skewed = { ...first!, platformFee: '0.674309', providerEarnings: '12.811888' };
    expect(failing({ ...run, sessions: [skewed, second!], payouts: ['1.425000', '12.811888'] })).toContain(
      "session 1: platform fee 0.674309 = 5% of 13.486197, to the token's unit",
    );
    expect(failing({ ...run, sessions: [{ ...first!, platformFeePercent: '2.5' }, second!] })).toHaveLength(1);
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
