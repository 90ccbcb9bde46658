/** What a proof of reserves found (reserves.ts): its own file, so the context can name it without a cycle. */
export interface ReserveReport {
  checked_at: string;
  /** The treasury's address and its balance of the platform token, read from the chain. */
  treasury: string;
  treasury_balance: string;
  /**
   * The treasury's SOL, which pays every transfer's fee (and the rent of token accounts a transfer creates); null when
   * it could not be read (it stops nothing).
   */
  treasury_sol: string | null;
  owed: { available: string; locked: string; pending_out: string; platform_fees: string; total: string };
  /** Withdrawals and payouts debited, not yet settled (`pending_out`). */
  in_flight: string;
  /** The part of `in_flight` whose transfer has not left the treasury (not landed at the commitment). */
  in_flight_unsent: string;
  /** What the treasury must hold at least: owed less what has left of what is in flight. */
  required: string;
  /** treasury_balance / required (6 decimals); null when nothing is required. */
  ratio: string | null;
  covered: boolean;
  /** What the treasury lacks (0 when covered). */
  gap: string;
}
