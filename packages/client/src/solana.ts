/**
 * Deposits a user can make (`@gpu/client/solana`): prove the wallet's address, send platform tokens to the treasury
 * from a keypair and have billing credit them, in three lines:
 *
 *   const keypair = readKeypair('~/.config/solana/id.json');
 *   await proveAddress(billing, walletId, keypair);
 *   const credited = await deposit({ billing, rpcUrl, keypair, walletId, amount: '100' });
 *
 * The transfer is an SPL `transferChecked` of the platform mint (from `GET /deposits/instructions`) from the
 * keypair's associated token account to the treasury's, sent and awaited at billing's commitment, then claimed with
 * `POST /wallet/{id}/deposit` (the claimed amount is checked on chain; a claim the chain has not finalised yet is
 * retried). The signature is the claim's idempotency key, so running it again never credits twice.
 */
import { createPrivateKey, sign } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { createTransferCheckedInstruction, getAssociatedTokenAddressSync } from '@solana/spl-token';
import { Connection, Keypair, PublicKey, sendAndConfirmTransaction, Transaction } from '@solana/web3.js';
import bs58 from 'bs58';
import type { Client } from 'openapi-fetch';
import { ApiError, unwrap } from './errors.ts';
import type { BillingPaths } from './index.ts';

type Billing = Client<BillingPaths>;

/** A keypair file as the Solana CLI writes it (a JSON array of the 64 secret-key bytes); `~` is the home folder. */
export function readKeypair(file: string): Keypair {
  const path = file.startsWith('~/') ? `${homedir()}${file.slice(1)}` : file;
  const bytes = JSON.parse(readFileSync(path, 'utf8')) as number[];
  if (!Array.isArray(bytes) || bytes.length !== 64) throw new Error(`${file} is not a Solana keypair file`);
  return Keypair.fromSecretKey(Uint8Array.from(bytes));
}

/** The keypair's ed25519 signature of `message` (UTF-8), base58: what a Solana wallet's "sign message" gives. */
export function signMessage(keypair: Keypair, message: string): string {
  const b64 = (bytes: Uint8Array) => Buffer.from(bytes).toString('base64url');
  const key = createPrivateKey({
    key: {
      kty: 'OKP',
      crv: 'Ed25519',
      d: b64(keypair.secretKey.slice(0, 32)),
      x: b64(keypair.secretKey.slice(32)),
    },
    format: 'jwk',
  });
  return bs58.encode(sign(null, Buffer.from(message, 'utf8'), key));
}

/** Proves the wallet's address with its keypair (challenge, signature, proof); nothing to do when already proven. */
export async function proveAddress(billing: Billing, walletId: string, keypair: Keypair): Promise<void> {
  const wallet = unwrap(await billing.GET('/api/v1/wallet/{walletID}', { params: { path: { walletID: walletId } } }));
  if (wallet.solana_address !== keypair.publicKey.toBase58()) {
    throw new Error(`wallet ${walletId} has address ${wallet.solana_address}, not the keypair's`);
  }
  if (wallet.address_proven_at) return;
  const challenge = unwrap(
    await billing.POST('/api/v1/wallet/{walletID}/address-challenge', { params: { path: { walletID: walletId } } }),
  );
  unwrap(
    await billing.POST('/api/v1/wallet/{walletID}/address-proof', {
      params: { path: { walletID: walletId } },
      body: { signature: signMessage(keypair, challenge.message) },
    }),
  );
}

/** Whole tokens as a decimal string → base units, exactly (no more decimals than the mint has). */
export function toBaseUnits(amount: string, decimals: number): bigint {
  const m = /^(\d+)(?:\.(\d+))?$/.exec(amount.trim());
  if (!m) throw new Error(`amount must be a positive decimal number, got ${amount}`);
  const fraction = m[2] ?? '';
  if (fraction.length > decimals) throw new Error(`amount ${amount} has more than ${decimals} decimals`);
  const units = BigInt(m[1]!) * 10n ** BigInt(decimals) + BigInt(fraction.padEnd(decimals, '0') || '0');
  if (units <= 0n) throw new Error('amount must be more than 0');
  return units;
}

export interface DepositOptions {
  billing: Billing;
  /** The Solana RPC URL of the cluster billing watches. */
  rpcUrl: string;
  /** The keypair of the wallet's (proven) address: owns the source token account and pays the fee. */
  keypair: Keypair;
  walletId: string;
  /** Tokens, a decimal string. */
  amount: string;
  /** How long to keep claiming a transfer the chain has not finalised yet (default 60 s). */
  claimTimeoutMs?: number;
}

/** The signature of the transfer and billing's deposit record. */
export interface Deposited {
  signature: string;
  transaction: { id: string; amount: string; status: string };
}

/** Sends `amount` platform tokens to the treasury and has billing credit them to the wallet. */
export async function deposit(opts: DepositOptions): Promise<Deposited> {
  const where = unwrap(await opts.billing.GET('/api/v1/deposits/instructions'));
  const connection = new Connection(opts.rpcUrl, where.commitment);
  const mint = new PublicKey(where.mint);
  const program = new PublicKey(where.token_program);
  const source = getAssociatedTokenAddressSync(mint, opts.keypair.publicKey, false, program);
  const tx = new Transaction().add(
    createTransferCheckedInstruction(
      source,
      mint,
      new PublicKey(where.treasury_token_account),
      opts.keypair.publicKey,
      toBaseUnits(opts.amount, where.decimals),
      where.decimals,
      [],
      program,
    ),
  );
  const signature = await sendAndConfirmTransaction(connection, tx, [opts.keypair], {
    commitment: where.commitment,
  });
  const deadline = Date.now() + (opts.claimTimeoutMs ?? 60_000);
  for (;;) {
    try {
      const transaction = unwrap(
        await opts.billing.POST('/api/v1/wallet/{walletID}/deposit', {
          params: { path: { walletID: opts.walletId }, header: { 'idempotency-key': `deposit:${signature}` } },
          body: { signature, amount: opts.amount },
        }),
      );
      return { signature, transaction };
    } catch (err) {
      if (!(err instanceof ApiError && err.code === 'DEPOSIT_NOT_FINAL') || Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
}
