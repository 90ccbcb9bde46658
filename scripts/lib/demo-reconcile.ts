/**
 * The demo's last word: what the services and the chain say after a rental, reconciled exactly (amounts as base
 * units of the token, integers). Each check is a line; the demo exits 0 only when every line holds.
 */

/** Decimal token amount → base units (the token's `decimals`), exactly. */
export function baseUnits(amount: string, decimals: number): bigint {
  const m = /^(-?)(\d+)(?:\.(\d+))?$/.exec(amount.trim());
  if (!m) throw new Error(`not a decimal amount: ${amount}`);
  const fraction = (m[3] ?? '').padEnd(decimals, '0');
  if (fraction.length > decimals && /[1-9]/.test(fraction.slice(decimals))) {
    throw new Error(`${amount} has more than ${decimals} decimals`);
  }
  const units = BigInt(m[2]!) * 10n ** BigInt(decimals) + BigInt(fraction.slice(0, decimals) || '0');
  return m[1] ? -units : units;
}

/** What the demo read back from billing and the chain. */
export interface RentalFigures {
  decimals: number;
  /** The session's billing record. */
  totalCost: string;
  providerEarnings: string;
  platformFee: string;
  platformFeePercent: string;
  /** The automatic payout of the provider's earnings. */
  payoutAmount: string;
  /** The renter's wallet after the session: its total and available balance; what was deposited. */
  renterTotal: string;
  renterAvailable: string;
  deposited: string;
  /** Tokens the renter's address received before depositing, and its balance on chain now (read from the chain). */
  renterReceived: string;
  renterAddressOnChain: string;
  /** Billing's own read of the renter's address (`GET /wallet/{id}/chain-balance`). */
  renterAddressPerBilling: string;
  /** The payout address's balance on chain (it held nothing before). */
  payoutAddressOnChain: string;
  /** The treasury token account before the deposit and after the payout. */
  treasuryBefore: string;
  treasuryAfter: string;
}

export interface Check {
  ok: boolean;
  line: string;
}

/** Every check of the rental's money, as lines; the rental reconciles when every one is `ok`. */
export function reconcile(f: RentalFigures): Check[] {
  const u = (s: string) => baseUnits(s, f.decimals);
  const fmt = (units: bigint) => {
    const negative = units < 0n;
    const abs = negative ? -units : units;
    const scale = 10n ** BigInt(f.decimals);
    const frac = (abs % scale).toString().padStart(f.decimals, '0');
    return `${negative ? '-' : ''}${abs / scale}.${frac}`;
  };
  const check = (ok: boolean, line: string): Check => ({ ok, line });
  const cost = u(f.totalCost);
  const earned = u(f.providerEarnings);
  const fee = u(f.platformFee);
  // The fee is the percentage of the cost, rounded to the token's unit: within half a unit of the exact share.
  const [whole, part = ''] = f.platformFeePercent.split('.');
  const pctScale = 10n ** BigInt(part.length);
  const pct = BigInt(whole ?? '0') * pctScale + BigInt(part || '0');
  const exactFeeTimes200 = cost * pct * 2n; // (cost × pct / 100) × 200 / pctScale, compared as integers
  const feeTimes200 = fee * 100n * pctScale * 2n;
  const feeOk = feeTimes200 - exactFeeTimes200 <= 100n * pctScale && exactFeeTimes200 - feeTimes200 <= 100n * pctScale;
  const deposited = u(f.deposited);
  const payout = u(f.payoutAmount);
  return [
    check(
      cost === earned + fee,
      `renter paid ${fmt(cost)} = provider earned ${fmt(earned)} + platform fee ${fmt(fee)}`,
    ),
    check(feeOk, `platform fee ${fmt(fee)} = ${f.platformFeePercent}% of ${fmt(cost)}, to the token's unit`),
    check(payout === earned, `paid out on chain ${fmt(payout)} = provider earned ${fmt(earned)}`),
    check(
      u(f.renterTotal) === deposited - cost && u(f.renterAvailable) === u(f.renterTotal),
      `renter's wallet ${fmt(u(f.renterTotal))} (all available) = deposited ${fmt(deposited)} - paid ${fmt(cost)}`,
    ),
    check(
      u(f.renterAddressOnChain) === u(f.renterReceived) - deposited &&
        u(f.renterAddressPerBilling) === u(f.renterAddressOnChain),
      `renter's address on chain ${fmt(u(f.renterAddressOnChain))} = received ${fmt(u(f.renterReceived))} - ` +
        `deposited ${fmt(deposited)} (billing reads ${fmt(u(f.renterAddressPerBilling))})`,
    ),
    check(
      u(f.payoutAddressOnChain) === payout,
      `provider's payout address on chain ${fmt(u(f.payoutAddressOnChain))} = paid out ${fmt(payout)}`,
    ),
    check(
      u(f.treasuryAfter) - u(f.treasuryBefore) === deposited - payout,
      `treasury on chain ${fmt(u(f.treasuryAfter) - u(f.treasuryBefore))} since the deposit = deposited ` +
        `${fmt(deposited)} - paid out ${fmt(payout)}`,
    ),
  ];
}
