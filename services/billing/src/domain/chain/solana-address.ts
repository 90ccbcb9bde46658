/** Validation of Solana addresses: base58 strings that decode to exactly 32 bytes. */
import { PublicKey } from '@solana/web3.js';

const BASE58 = /^[1-9A-HJ-NP-Za-km-z]{32,44}$/;

/** Whether `value` is a canonical base58 encoding of a 32-byte public key. */
export function isSolanaAddress(value: string): boolean {
  if (!BASE58.test(value)) return false;
  try {
    return new PublicKey(value).toBase58() === value;
  } catch {
    return false;
  }
}
