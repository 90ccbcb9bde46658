/**
 * Proving a wallet's Solana address. A wallet declares its address when it is opened; before any deposit is
 * credited to it, its holder proves control of that address by signing a one-time challenge with the address's
 * key (ed25519, the same signature a Solana wallet's "sign message" produces):
 *
 *   1. POST /wallet/{id}/address-challenge → `message` (names the wallet, the address, a nonce, an expiry);
 *   2. sign the message's UTF-8 bytes with the address's key;
 *   3. POST /wallet/{id}/address-proof `{signature}` (base58, 64 bytes) → the wallet, `address_proven_at` set.
 *
 * A challenge is used once and expires after `CHALLENGE_TTL_MS`; a newer challenge replaces an older one.
 */
import { createPublicKey, randomBytes, verify } from 'node:crypto';
import type { Principal } from '@gpu/common';
import { PublicKey } from '@solana/web3.js';
import {
  findWallet,
  lockAddressProofs,
  markAddressProven,
  otherProvenHolders,
  setAddressChallenge,
} from '../../db/wallet-repository.ts';
import { billingErrors } from '../../errors.ts';
import { base58Decode } from '../chain/index.ts';
import type { BillingContext } from '../context.ts';
import { toWallet, type Wallet, walletFor } from './wallets.ts';

const CHALLENGE_TTL_MS = 10 * 60_000;

export interface AddressChallenge {
  walletId: string;
  solanaAddress: string;
  /** The exact text to sign (UTF-8). */
  message: string;
  expiresAt: Date;
}

/** A new challenge for the wallet's holder (or an admin or service). */
export async function issueAddressChallenge(
  ctx: BillingContext,
  actor: Principal,
  walletId: string,
): Promise<AddressChallenge> {
  const wallet = await walletFor(ctx, actor, walletId);
  if (!wallet.solanaAddress) throw billingErrors.noWalletAddress(wallet.id);
  const expiresAt = new Date(ctx.now().getTime() + CHALLENGE_TTL_MS);
  const message =
    `GPU rental platform: I control ${wallet.solanaAddress} and link it to billing wallet ${wallet.id}.\n` +
    'Sign this only in the GPU rental platform, for your own wallet: whoever holds that wallet receives your deposits.\n' +
    `Nonce: ${randomBytes(16).toString('hex')}\nExpires: ${expiresAt.toISOString()}`;
  await setAddressChallenge(ctx.db, wallet.id, message, expiresAt);
  return { walletId: wallet.id, solanaAddress: wallet.solanaAddress, message, expiresAt };
}

/** Whether `signature` (base58) is the address's ed25519 signature of `message`. */
function isAddressSignature(address: string, message: string, signature: string): boolean {
  const sig = base58Decode(signature);
  if (sig?.length !== 64) return false;
  const key = createPublicKey({
    key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(new PublicKey(address).toBytes()).toString('base64url') },
    format: 'jwk',
  });
  return verify(null, Buffer.from(message, 'utf8'), key, sig);
}

/** Checks the holder's signature of the wallet's pending challenge and marks the address proven. */
export async function proveAddress(
  ctx: BillingContext,
  actor: Principal,
  walletId: string,
  signature: string,
): Promise<Wallet> {
  const wallet = await walletFor(ctx, actor, walletId);
  if (wallet.addressProvenAt) return wallet;
  if (!wallet.solanaAddress) throw billingErrors.noWalletAddress(wallet.id);
  const row = await findWallet(ctx.db, wallet.id);
  const challenge = row?.address_challenge;
  if (
    !challenge ||
    !row.address_challenge_expires_at ||
    row.address_challenge_expires_at.getTime() <= ctx.now().getTime()
  ) {
    throw billingErrors.noAddressChallenge(wallet.id);
  }
  if (!isAddressSignature(wallet.solanaAddress, challenge, signature)) {
    throw billingErrors.addressProofInvalid(wallet.solanaAddress);
  }
  // An address belongs to one user: once proven by one holder, another holder cannot prove it too (a victim tricked
  // into signing someone else's challenge would otherwise share their deposits with them). Checked and marked under
  // the address's lock: two holders proving it at once do not both pass the check.
  const address = wallet.solanaAddress;
  const proven = await ctx.db.transaction().execute(async (trx) => {
    await lockAddressProofs(trx, address);
    const others = await otherProvenHolders(trx, address, wallet.id);
    if (others.some((holder) => holder !== wallet.holderId)) throw billingErrors.addressProvenElsewhere(address);
    return markAddressProven(trx, wallet.id, challenge, ctx.now());
  });
  if (proven) return toWallet(proven);
  // Proven by a concurrent request with the same challenge, or a newer challenge replaced it.
  const now = await walletFor(ctx, actor, walletId);
  if (now.addressProvenAt) return now;
  throw billingErrors.noAddressChallenge(wallet.id);
}
