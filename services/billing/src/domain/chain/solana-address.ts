/** Validation of Solana addresses: base58 strings that decode to exactly 32 bytes. */
import { PublicKey } from '@solana/web3.js';

/** The text of a Solana address: base58's alphabet, 32 to 44 characters (the encodings of 32 bytes). */
export const SOLANA_ADDRESS_PATTERN = /^[1-9A-HJ-NP-Za-km-z]{32,44}$/;

/** Whether `value` is a canonical base58 encoding of a 32-byte public key. */
export function isSolanaAddress(value: string): boolean {
  if (!SOLANA_ADDRESS_PATTERN.test(value)) return false;
  try {
    return new PublicKey(value).toBase58() === value;
  } catch {
    return false;
  }
}
