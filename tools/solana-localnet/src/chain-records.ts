/**
 * What the local chain records of a transaction and answers of a simulation, and the fee per signature: shared by
 * the chain (chain.ts) and the executor (execute.ts), which depend on these and not on each other.
 */
import type { uiTokenAmount } from './accounts.ts';
import type { TxErrorJson } from './tx-errors.ts';

export const LAMPORTS_PER_SIGNATURE = 5000;

export interface TokenBalance {
  accountIndex: number;
  mint: string;
  owner: string;
  programId: string;
  uiTokenAmount: ReturnType<typeof uiTokenAmount>;
}

interface InnerInstructionJson {
  index: number;
  instructions: { programIdIndex: number; accounts: number[]; data: string; stackHeight: number }[];
}

/** One landed transaction, successful or failed. */
export interface TxRecord {
  signature: string;
  /** the signed transaction as sent, base64 */
  wire: string;
  version: 'legacy' | 0 | 1;
  slot: number;
  blockTime: number;
  /** static keys, then keys loaded from lookup tables (writable, readonly) */
  keys: string[];
  loaded: { writable: string[]; readonly: string[] };
  err: TxErrorJson | null;
  fee: number;
  preBalances: number[];
  postBalances: number[];
  preTokenBalances: TokenBalance[];
  postTokenBalances: TokenBalance[];
  logs: string[];
  innerInstructions: InnerInstructionJson[];
  computeUnitsConsumed: number;
  /** slot from which the transaction counts as finalized */
  finalizedAt: number;
}

/** What `simulate` found. */
export interface SimulationResult {
  err: TxErrorJson | null;
  logs: string[];
  unitsConsumed: number;
}
