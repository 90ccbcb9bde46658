export { base58Decode, base58Encode } from './base58.ts';
export {
  type Chain,
  ChainRejection,
  ChainUnavailable,
  type Commitment,
  type DestinationProblem,
  landedAt,
  type PreparedTransfer,
  type SignatureState,
  type SignedTransfer,
  type TransferOptions,
  type VerifiedDeposit,
} from './chain.ts';
export { chainError } from './errors.ts';
export { isSolanaAddress, SOLANA_ADDRESS_PATTERN } from './solana-address.ts';
