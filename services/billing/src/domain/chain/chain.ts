/**
 * The billing service's view of the blockchain, a port the domain owns: deposit verification, signed transfers out of
 * the treasury, signature states and token balances, and the errors they raise. The Solana implementation is
 * `adapters/solana-chain.ts`; the rest of the service codes against this interface only.
 */

/** Token amounts cross this interface as decimal strings in whole-token units (e.g. "12.5"), never floats. */
export interface VerifiedDeposit {
  signature: string;
  /** post minus pre balance of the treasury's token account for the platform mint, in tokens. */
  amount: string;
  /** owner (wallet address) whose token balance decreased by the transfer */
  sourceOwner: string;
  slot: number;
  blockTime: string | null; // RFC 3339
}

export type DepositRejection =
  | 'NOT_FOUND'
  | 'FAILED'
  | 'NOT_FINAL'
  | 'WRONG_MINT'
  | 'WRONG_RECIPIENT'
  | 'WRONG_SOURCE'
  | 'AMOUNT_TOO_LOW';

/** A deposit that verification refused, with the reason (a client error: nothing is credited). */
export class ChainRejection extends Error {
  constructor(
    readonly reason: DepositRejection,
    message: string,
  ) {
    super(message);
    this.name = 'ChainRejection';
  }
}

/** The RPC could not be reached or answered an error: the caller maps it to SOLANA_UNAVAILABLE. */
export class ChainUnavailable extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ChainUnavailable';
  }
}

/** A signed transfer as it is recorded and (re-)sent. */
export interface SignedTransfer {
  signature: string; // known before sending: record it first (crash safety)
  serialized: string; // base64 signed transaction, re-sendable as is
  lastValidBlockHeight: number;
}

/** A transfer just built: what it sends, and whether it creates the destination's token account. */
export interface PreparedTransfer extends SignedTransfer {
  /**
   * Whether the transaction creates the destination owner's associated token account (none was there when it was
   * built): the treasury pays that account's rent in SOL, and the owner can close it and keep the rent.
   */
  createsAccount: boolean;
  /** Tokens the transfer moves (decimal string): the amount asked for, less the account fee when it creates one. */
  sent: string;
}

/** How a transfer is built. */
export interface TransferOptions {
  /**
   * Tokens withheld from the amount when the transfer must create the destination's token account (decimal string;
   * default 0): what that account's rent costs the treasury. A RangeError when nothing would be left to send.
   */
  accountFee?: string;
}

/**
 * Why an address cannot receive a payout: a program (or a loader's or sysvar's account), the system address, an
 * account of the token program (a token account or a mint) rather than an owner, whose associated token account
 * would strand the tokens, an address the platform itself controls (the treasury, its token account, the mint, the
 * mint's mint or freeze authority: the tokens would never leave the platform while billing counted them as paid out),
 * or a burn address (the incinerator).
 */
export type DestinationProblem = 'program' | 'system_address' | 'token_account' | 'platform_address' | 'burn_address';

export type SignatureState = 'finalized' | 'confirmed' | 'processed' | 'failed' | 'unknown';

export type Commitment = 'processed' | 'confirmed' | 'finalized';

const LANDED: Record<Commitment, readonly SignatureState[]> = {
  finalized: ['finalized'],
  confirmed: ['confirmed', 'finalized'],
  processed: ['processed', 'confirmed', 'finalized'],
};

/**
 * Whether a transfer in `state` has landed at `commitment`: settled as sent, and gone from balances read at that
 * commitment (`Chain.tokenBalance` reads at the one billing is configured with).
 */
export const landedAt = (commitment: Commitment, state: SignatureState) => LANDED[commitment].includes(state);

export interface Chain {
  /** Verifies a deposit: succeeded, at the configured commitment, moved at least `minAmount` (if given) of the
   * platform mint into the treasury's token account (post - pre), from `expectedSourceOwner`. Throws ChainRejection. */
  verifyDeposit(signature: string, expectedSourceOwner: string, minAmount?: string): Promise<VerifiedDeposit>;
  /** Builds and signs (does not send) a transferChecked of `amount` tokens from the treasury to the destination
   * owner's associated token account, creating that account in the same transaction when it is missing (and then
   * sending `amount` less `options.accountFee`). */
  prepareTransfer(destinationOwner: string, amount: string, options?: TransferOptions): Promise<PreparedTransfer>;
  /** Sends a signed transaction (idempotent: same signature) and waits for the configured commitment;
   * resolves with the final state ('finalized'/'confirmed' or 'failed'). */
  sendAndConfirm(transfer: SignedTransfer): Promise<SignatureState>;
  /** State of a signature, and whether its blockhash has expired (an unknown, expired tx can never land). */
  signatureState(
    signature: string,
    lastValidBlockHeight?: number,
  ): Promise<{ state: SignatureState; expired: boolean }>;
  /**
   * The states of many signatures at once (as `signatureState` without an expiry), in their order: one request per 256.
   */
  signatureStates(signatures: readonly string[]): Promise<SignatureState[]>;
  /**
   * Why `address` cannot own the tokens a payout sends, or null when it can (a wallet, a new address, an address
   * off the curve such as a program-derived vault, which can own a token account). Asks the chain (the account at the
   * address, the mint's current authorities).
   */
  destinationProblem(address: string): Promise<DestinationProblem | null>;
  /**
   * What `destinationProblem` can tell without the chain: the system program, well-known programs, burn addresses,
   * the platform's own addresses (the mint's authorities as read at start-up); null when only the chain can tell.
   */
  knownDestinationProblem(address: string): DestinationProblem | null;
  /**
   * Token balance (tokens, decimal string) of an owner's associated token account at the configured commitment; "0"
   * when it has none.
   */
  tokenBalance(owner: string): Promise<string>;
  /**
   * The treasury's SOL (decimal string, whole SOL) at the configured commitment: what pays every transfer's fee and
   * the rent of each token account a transfer creates.
   */
  treasurySol(): Promise<string>;
  treasuryAddress(): string;
  /** The treasury's associated token account for the mint: where deposits go. */
  treasuryTokenAccount(): string;
  mintAddress(): string;
  /** The token program that owns the mint (SPL Token or Token-2022). */
  tokenProgramAddress(): string;
  decimals(): number;
  ping(): Promise<void>;
}
