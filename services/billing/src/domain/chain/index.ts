export { base58Decode, base58Encode } from './base58.ts';
export {
  type Chain,
  ChainRejection,
  ChainUnavailable,
  type DestinationProblem,
  landedAt,
  type PreparedTransfer,
  type SignatureState,
  type VerifiedDeposit,
} from './chain.ts';
export { chainError } from './errors.ts';
export { isSolanaAddress } from './solana-address.ts';
