/**
 * The rules of a valid deposit, applied to a landed, successful transaction's
 * token balances: how much of the platform mint the treasury's token account
 * gained (post minus pre), and that the claimed wallet paid all of it.
 */
import type { VersionedTransactionResponse } from '@solana/web3.js';
import { ChainRejection } from '../domain/chain/index.ts';
import { fromBaseUnits } from './token-units.ts';

export interface DepositRules {
  mint: string;
  decimals: number;
  /** the treasury wallet (owner of its token accounts) */
  treasury: string;
  /** the treasury's associated token account for the mint */
  treasuryTokenAccount: string;
  expectedSourceOwner: string;
  /** minimum credited amount in base units */
  minUnits?: bigint;
}

interface Delta {
  account: string;
  mint: string;
  owner: string | undefined;
  delta: bigint;
}

/** Token balance changes per account of `tx` (post minus pre; an account missing on one side counts as 0). */
function tokenDeltas(tx: VersionedTransactionResponse): Delta[] {
  const meta = tx.meta!;
  const keys = tx.transaction.message.getAccountKeys({ accountKeysFromLookups: meta.loadedAddresses });
  const rows = new Map<number, Delta>();
  for (const b of meta.preTokenBalances ?? []) {
    const account = keys.get(b.accountIndex)?.toBase58() ?? `#${b.accountIndex}`;
    rows.set(b.accountIndex, { account, mint: b.mint, owner: b.owner, delta: -BigInt(b.uiTokenAmount.amount) });
  }
  for (const b of meta.postTokenBalances ?? []) {
    const row = rows.get(b.accountIndex);
    if (row) row.delta += BigInt(b.uiTokenAmount.amount);
    else {
      const account = keys.get(b.accountIndex)?.toBase58() ?? `#${b.accountIndex}`;
      rows.set(b.accountIndex, { account, mint: b.mint, owner: b.owner, delta: BigInt(b.uiTokenAmount.amount) });
    }
  }
  return [...rows.values()];
}

/** The amount (base units) `tx` deposited under `rules`; throws ChainRejection when it is not a valid deposit. */
export function checkDeposit(tx: VersionedTransactionResponse, rules: DepositRules): bigint {
  const rows = tokenDeltas(tx);
  // The treasury's token account alone, which reserves read and payouts spend: anyone may open another token account
  // of the mint owned by the treasury (no signature of the owner's is needed) and send tokens there, which a credit
  // would count as owed while the treasury's balance did not grow (a false shortfall stops every payout).
  const isTreasury = (r: Delta) => r.account === rules.treasuryTokenAccount;
  const platform = rows.filter((r) => r.mint === rules.mint);
  const received = platform.filter(isTreasury).reduce((sum, r) => sum + r.delta, 0n);
  const tokens = (units: bigint) => fromBaseUnits(units, rules.decimals);

  if (received <= 0n) {
    const otherMint = rows.find((r) => r.mint !== rules.mint && isTreasury(r) && r.delta > 0n);
    if (otherMint) {
      throw new ChainRejection('WRONG_MINT', `it moved tokens of mint ${otherMint.mint}, not ${rules.mint}`);
    }
    const elsewhere = platform.find((r) => !isTreasury(r) && r.delta > 0n);
    if (elsewhere) {
      throw new ChainRejection(
        'WRONG_RECIPIENT',
        `it moved platform tokens to the token account ${elsewhere.account}` +
          `${elsewhere.owner ? ` (of ${elsewhere.owner})` : ''}, not to the treasury's ${rules.treasuryTokenAccount}`,
      );
    }
    throw new ChainRejection('WRONG_MINT', `it moved no tokens of mint ${rules.mint} into the treasury`);
  }

  const paid = new Map<string, bigint>();
  for (const r of platform) {
    if (r.delta < 0n && !isTreasury(r)) {
      const owner = r.owner ?? r.account;
      paid.set(owner, (paid.get(owner) ?? 0n) + -r.delta);
    }
  }
  const fromExpected = paid.get(rules.expectedSourceOwner) ?? 0n;
  if (fromExpected < received) {
    const payers = [...paid.keys()].join(', ') || 'no wallet (the tokens were minted)';
    throw new ChainRejection(
      'WRONG_SOURCE',
      fromExpected === 0n
        ? `the tokens came from ${payers}, not from ${rules.expectedSourceOwner}`
        : `only ${tokens(fromExpected)} of the ${tokens(received)} tokens came from ${rules.expectedSourceOwner}`,
    );
  }
  if (rules.minUnits !== undefined && received < rules.minUnits) {
    throw new ChainRejection(
      'AMOUNT_TOO_LOW',
      `it moved ${tokens(received)} tokens into the treasury, less than the claimed ${tokens(rules.minUnits)}`,
    );
  }
  return received;
}
