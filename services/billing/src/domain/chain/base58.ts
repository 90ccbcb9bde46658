/** Base58 (the Bitcoin alphabet Solana uses) for signatures and addresses: `bs58`, as @solana/web3.js uses it. */
import bs58 from 'bs58';

/** Base58 text of `bytes`. */
export function base58Encode(bytes: Uint8Array): string {
  return bs58.encode(bytes);
}

/** Bytes of base58 `text`; null when it is not base58. */
export function base58Decode(text: string): Uint8Array | null {
  return bs58.decodeUnsafe(text) ?? null;
}
