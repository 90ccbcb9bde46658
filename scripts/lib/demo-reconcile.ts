/**
 * The demo's last word: what the services and the chain say once the market's rentals ended, reconciled exactly
 * (amounts as base units of the token, integers): each session's split, the provider's payouts (less the token account
 * fee of the one that created the payout address's token account), each renter's wallet (deposits less rentals and
 * storage) and address, the treasury. Each check is a line; the demo exits 0 only when every line holds.
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

/** One rental's billing record. */
interface SessionFigures {
  totalCost: string;
  providerEarnings: string;
  platformFee: string;
  platformFeePercent: string;
}

/** One renter: their wallet after the market closed, what they deposited and stored, their address on chain. */
export interface RenterFigures {
  name: string;
  /** The wallet's total and available balance now. */
  total: string;
  available: string;
  deposited: string;
  /** Every session the renter ran (their billing records' costs). */
  sessionCosts: string[];
  /** What storage charges took from the wallet (`charged` of each of the renter's storage charges). */
  storageCharged: string[];
  /** Tokens the renter's address received before depositing, and its balance on chain now (read from the chain). */
  received: string;
  addressOnChain: string;
  /** Billing's own read of the renter's address (`GET /wallet/{id}/chain-balance`). */
  addressPerBilling: string;
}

/** What the demo read back from billing and the chain once every session ended. */
export interface MarketFigures {
  decimals: number;
  sessions: SessionFigures[];
  renters: RenterFigures[];
  /** The automatic payouts of the provider's earnings (confirmed on chain). */
  payouts: string[];
  /**
   * The token account fee each payout withheld (its `fee`: the one that created the address's token account sent its
   * amount less the fee, which the platform keeps), in the order of `payouts`.
   */
  payoutFees: string[];
  /** The payout address's balance on chain (it held nothing before). */
  payoutAddressOnChain: string;
  /** The treasury token account before the first deposit and after the last payout. */
  treasuryBefore: string;
  treasuryAfter: string;
}

export interface Check {
  ok: boolean;
  line: string;
}

/** Every check of the market's money, as lines; it reconciles when every one is `ok`. */
export function reconcile(f: MarketFigures): Check[] {
  const u = (s: string) => baseUnits(s, f.decimals);
  const sum = (xs: string[]) => xs.reduce((acc, x) => acc + u(x), 0n);
  const fmt = (units: bigint) => {
    const negative = units < 0n;
    const abs = negative ? -units : units;
    const scale = 10n ** BigInt(f.decimals);
    const frac = (abs % scale).toString().padStart(f.decimals, '0');
    return `${negative ? '-' : ''}${abs / scale}.${frac}`;
  };
  const check = (ok: boolean, line: string): Check => ({ ok, line });
  const checks: Check[] = [];
  f.sessions.forEach((s, i) => {
    const cost = u(s.totalCost);
    const earned = u(s.providerEarnings);
    const fee = u(s.platformFee);
    const label = f.sessions.length > 1 ? `session ${i + 1}: ` : '';
    // The fee is the percentage of the cost, rounded to the token's unit: within half a unit of the exact share.
    const [whole, part = ''] = s.platformFeePercent.split('.');
    const pctScale = 10n ** BigInt(part.length);
    const pct = BigInt(whole ?? '0') * pctScale + BigInt(part || '0');
    const exactFeeTimes200 = cost * pct * 2n; // (cost × pct / 100) × 200 / pctScale, compared as integers
    const feeTimes200 = fee * 100n * pctScale * 2n;
    const feeOk =
      feeTimes200 - exactFeeTimes200 <= 100n * pctScale && exactFeeTimes200 - feeTimes200 <= 100n * pctScale;
    checks.push(
      check(
        cost === earned + fee,
        `${label}renter paid ${fmt(cost)} = provider earned ${fmt(earned)} + platform fee ${fmt(fee)}`,
      ),
      check(feeOk, `${label}platform fee ${fmt(fee)} = ${s.platformFeePercent}% of ${fmt(cost)}, to the token's unit`),
    );
  });
  const earned = sum(f.sessions.map((s) => s.providerEarnings));
  const paidOut = sum(f.payouts);
  checks.push(check(paidOut === earned, `paid out on chain ${fmt(paidOut)} = provider earned ${fmt(earned)}`));
  for (const r of f.renters) {
    const deposited = u(r.deposited);
    const paid = sum(r.sessionCosts);
    const stored = sum(r.storageCharged);
    checks.push(
      check(
        u(r.total) === deposited - paid - stored && u(r.available) === u(r.total),
        `${r.name}'s wallet ${fmt(u(r.total))} (all available) = deposited ${fmt(deposited)} - rentals ` +
          `${fmt(paid)} - storage ${fmt(stored)}`,
      ),
      check(
        u(r.addressOnChain) === u(r.received) - deposited && u(r.addressPerBilling) === u(r.addressOnChain),
        `${r.name}'s address on chain ${fmt(u(r.addressOnChain))} = received ${fmt(u(r.received))} - ` +
          `deposited ${fmt(deposited)} (billing reads ${fmt(u(r.addressPerBilling))})`,
      ),
    );
  }
  const deposited = sum(f.renters.map((r) => r.deposited));
  const fees = sum(f.payoutFees);
  const sent = paidOut - fees;
  checks.push(
    check(
      u(f.payoutAddressOnChain) === sent,
      `provider's payout address on chain ${fmt(u(f.payoutAddressOnChain))} = paid out ${fmt(paidOut)} - token ` +
        `account fee ${fmt(fees)}`,
    ),
    check(
      u(f.treasuryAfter) - u(f.treasuryBefore) === deposited - sent,
      `treasury on chain ${fmt(u(f.treasuryAfter) - u(f.treasuryBefore))} since the first deposit = deposited ` +
        `${fmt(deposited)} - sent ${fmt(sent)}`,
    ),
  );
  return checks;
}

/** What billing reports of a provider's payouts while the demo waits for them (its earnings and payout transactions). */
export interface PayoutProgress {
  decimals: number;
  /** `GET /provider/{id}/earnings`: what is left to pay out now, what payouts are under way, the minimum payout. */
  earnings: { available_for_payout: string; pending_payouts: string; minimum_payout: string };
  /** The provider wallet's payout transactions, each with its status. */
  payouts: { amount: string; status: string }[];
}

/**
 * Whether the automatic payouts are over: none under way (no payout transaction pending, no pending payouts in the
 * earnings) and none due (what is left to pay out is under the minimum payout, below which billing pays nothing). Not
 * whether they add up: that is the reconciliation's to say, so a payout too many or too large ends the wait as well
 * and shows as a FAIL line, where waiting for the payouts to equal the earnings would wait for ever.
 */
export function payoutsSettled(p: PayoutProgress): boolean {
  const u = (s: string) => baseUnits(s, p.decimals);
  const underWay = p.payouts.some((t) => t.status === 'pending') || u(p.earnings.pending_payouts) !== 0n;
  const available = u(p.earnings.available_for_payout);
  const due = available > 0n && available >= u(p.earnings.minimum_payout);
  return !underWay && !due;
}
