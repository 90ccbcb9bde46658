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
 * retried). The claim's idempotency key is `deposit:<signature>`, so claiming again never credits twice.
 *
 * Nothing is sent that billing could refuse to credit: the amount is checked with billing's own rule, the wallet must
 * have the keypair's address, proven, and the treasury token account must be the treasury's associated token account
 * of the mint. Once tokens are sent, a failed claim, or a confirmation that does not come in time, throws a
 * `DepositClaimError` carrying the signature: `claimDeposit` (or `pnpm wallet claim`) claims it later.
 */
import { createPrivateKey, sign } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import {
  createTransferCheckedInstruction,
  getAssociatedTokenAddressSync,
  TOKEN_2022_PROGRAM_ID,
  TOKEN_PROGRAM_ID,
} from '@solana/spl-token';
import { Connection, Keypair, PublicKey, Transaction } from '@solana/web3.js';
import bs58 from 'bs58';
import type { Client } from 'openapi-fetch';
import { ApiError, unwrap } from './errors.ts';
import type { BillingPaths } from './index.ts';

type Billing = Client<BillingPaths>;

/** A keypair file as the Solana CLI writes it (a JSON array of the 64 secret-key bytes); `~` is the home folder. */
export function readKeypair(file: string): Keypair {
  const path = file.startsWith('~/') ? `${homedir()}${file.slice(1)}` : file;
  const text = readFileSync(path, 'utf8');
  // The parser's own message quotes the text (a base58 secret pasted into the file): never repeated.
  const notOne = () =>
    new Error(`${file} is not a Solana keypair file (a JSON array of 64 numbers, as solana-keygen writes)`);
  let bytes: unknown;
  try {
    bytes = JSON.parse(text);
  } catch {
    throw notOne();
  }
  const byte = (n: unknown) => Number.isInteger(n) && (n as number) >= 0 && (n as number) <= 255;
  if (!Array.isArray(bytes) || bytes.length !== 64 || !bytes.every(byte)) throw notOne();
  try {
    return Keypair.fromSecretKey(Uint8Array.from(bytes as number[]));
  } catch {
    throw notOne();
  }
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

/**
 * The first line of billing's address challenge (services/billing/src/domain/wallets/address-proof.ts): what the signature
 * claims. A message that does not start with it for this wallet and address is not signed, so a billing that is not
 * what it should be cannot have the keypair prove its address for another wallet.
 */
const challengeStatement = (address: string, walletId: string) =>
  `GPU rental platform: I control ${address} and link it to billing wallet ${walletId}.\n`;

/**
 * Proves the wallet's address with its keypair (challenge, signature, proof); nothing to do when already proven.
 * Refuses to sign a challenge that does not name this wallet and the keypair's address.
 */
export async function proveAddress(billing: Billing, walletId: string, keypair: Keypair): Promise<void> {
  const address = keypair.publicKey.toBase58();
  const wallet = unwrap(await billing.GET('/api/v1/wallet/{walletID}', { params: { path: { walletID: walletId } } }));
  if (wallet.solana_address !== address) {
    throw new Error(`wallet ${walletId} has address ${wallet.solana_address}, not the keypair's`);
  }
  if (wallet.address_proven_at) return;
  const challenge = unwrap(
    await billing.POST('/api/v1/wallet/{walletID}/address-challenge', { params: { path: { walletID: walletId } } }),
  );
  if (!challenge.message.startsWith(challengeStatement(address, walletId))) {
    throw new Error(
      `refusing to sign billing's address challenge: it does not name wallet ${walletId} and address ${address}`,
    );
  }
  unwrap(
    await billing.POST('/api/v1/wallet/{walletID}/address-proof', {
      params: { path: { walletID: walletId } },
      body: { signature: signMessage(keypair, challenge.message) },
    }),
  );
}

/** Billing's rule for an amount string (`amountString` in services/billing/src/routes/schemas.ts). */
const AMOUNT_RE = /^(0|[1-9]\d{0,29})(?:\.(\d+))?$/;

/**
 * Whole tokens as a decimal string → base units, exactly (no more decimals than the mint has). The string must be
 * one billing accepts: digits without leading zeros or spaces, an optional fraction ("12.5", "0.25").
 */
export function toBaseUnits(amount: string, decimals: number): bigint {
  const m = AMOUNT_RE.exec(amount);
  if (!m) throw new Error(`amount must be a positive decimal number like "12.5", got "${amount}"`);
  const fraction = m[2] ?? '';
  if (fraction.length > decimals) throw new Error(`amount ${amount} has more than ${decimals} decimals`);
  const units = BigInt(m[1]!) * 10n ** BigInt(decimals) + BigInt(fraction.padEnd(decimals, '0') || '0');
  if (units <= 0n) throw new Error('amount must be more than 0');
  return units;
}

/** Base units → billing's form of the amount: all the mint's decimals (12_500_000n, 6 → "12.500000"). */
export function fromBaseUnits(units: bigint, decimals: number): string {
  const digits = units.toString().padStart(decimals + 1, '0');
  if (decimals === 0) return digits;
  return `${digits.slice(0, -decimals)}.${digits.slice(-decimals)}`;
}

/**
 * A transfer that was sent but not credited: its signature, and how to claim it later. `stage` says where it
 * stopped: `claim` (the chain has the transfer; billing did not credit it) or `confirm` (sent, but not seen at
 * billing's commitment in time: it may still land, or may have expired; a later claim credits it or answers that
 * the chain does not have it).
 */
export class DepositClaimError extends Error {
  constructor(
    readonly signature: string,
    readonly walletId: string,
    /** The amount claimed, billing's form (claim it later with the same). */
    readonly amount: string,
    cause: unknown,
    readonly stage: 'claim' | 'confirm' = 'claim',
  ) {
    const why = cause instanceof Error ? cause.message : String(cause);
    super(
      (stage === 'claim'
        ? `sent ${amount} tokens to the treasury (signature ${signature}) but billing did not credit them: ${why}. ` +
          'The tokens are not lost: claim them later with '
        : `sent ${amount} tokens to the treasury (signature ${signature}) but the chain did not confirm the ` +
          `transfer in time: ${why}. If it lands, claim it with `) +
        `\`pnpm wallet claim --signature ${signature} --amount ${amount} --wallet ${walletId}\` ` +
        '(or claimDeposit from @gpu/client/solana)',
      { cause },
    );
    this.name = 'DepositClaimError';
  }

  /** The command line that claims the transfer later. */
  get claimCommand(): string {
    return `pnpm wallet claim --signature ${this.signature} --amount ${this.amount} --wallet ${this.walletId}`;
  }
}

export interface ClaimOptions {
  billing: Billing;
  walletId: string;
  /** The transfer's signature (base58). */
  signature: string;
  /**
   * The amount to claim (tokens, a decimal string): the transfer must have moved at least this. Sent in billing's
   * form, so "12.5" and "12.500000" are the same claim; a claim retried after a lost answer must name the same.
   */
  amount?: string;
  /** How long to keep claiming a transfer the chain has not finalised yet (default 60 s). */
  timeoutMs?: number;
}

/** The signature of the transfer and billing's deposit record. */
export interface Deposited {
  signature: string;
  transaction: { id: string; amount: string; status: string };
}

/**
 * Has billing credit a transfer to the treasury already made (`POST /wallet/{id}/deposit`, idempotency key
 * `deposit:<signature>`): a claim the chain has not finalised yet is retried until `timeoutMs`; any other refusal
 * throws its `ApiError`. Claiming a credited signature again with the same amount answers the same record (billing
 * binds the key to the request: another amount, or none after one, is refused).
 */
export async function claimDeposit(opts: ClaimOptions): Promise<Deposited> {
  let amount: string | undefined;
  if (opts.amount !== undefined) {
    const { decimals } = unwrap(await opts.billing.GET('/api/v1/deposits/instructions'));
    amount = fromBaseUnits(toBaseUnits(opts.amount, decimals), decimals);
  }
  return claim(opts.billing, opts.walletId, opts.signature, amount, opts.timeoutMs);
}

async function claim(
  billing: Billing,
  walletId: string,
  signature: string,
  amount: string | undefined,
  timeoutMs = 60_000,
): Promise<Deposited> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const transaction = unwrap(
        await billing.POST('/api/v1/wallet/{walletID}/deposit', {
          params: { path: { walletID: walletId }, header: { 'idempotency-key': `deposit:${signature}` } },
          body: amount === undefined ? { signature } : { signature, amount },
        }),
      );
      return { signature, transaction };
    } catch (err) {
      if (err instanceof ApiError && err.code === 'IDEMPOTENCY_KEY_REUSED') {
        throw new Error(
          `${signature} was claimed before with ${amount === undefined ? 'an amount' : 'another amount'}: ` +
            'claim it with the same amount as then (the amount of the deposit)',
          { cause: err },
        );
      }
      if (!(err instanceof ApiError && err.code === 'DEPOSIT_NOT_FINAL') || Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
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

const TOKEN_PROGRAMS = [TOKEN_PROGRAM_ID.toBase58(), TOKEN_2022_PROGRAM_ID.toBase58()];

/**
 * Sends `amount` platform tokens to the treasury and has billing credit them to the wallet. Before sending, refuses
 * what billing would not credit (an amount outside its rule, a wallet of another address or not proven yet) and a
 * destination that is not the treasury's associated token account. After sending, a failed claim throws a
 * `DepositClaimError` with the signature.
 */
export async function deposit(opts: DepositOptions): Promise<Deposited> {
  const address = opts.keypair.publicKey.toBase58();
  const [where, wallet] = await Promise.all([
    opts.billing.GET('/api/v1/deposits/instructions').then(unwrap),
    opts.billing.GET('/api/v1/wallet/{walletID}', { params: { path: { walletID: opts.walletId } } }).then(unwrap),
  ]);
  if (wallet.solana_address !== address) {
    throw new Error(`wallet ${opts.walletId} has address ${wallet.solana_address}, not the keypair's (${address})`);
  }
  if (!wallet.address_proven_at) {
    throw new Error(
      `wallet ${opts.walletId} has not proven its address ${address}: prove it first (proveAddress, or ` +
        '`pnpm wallet open --keypair FILE`); billing credits deposits only to a proven address',
    );
  }
  const units = toBaseUnits(opts.amount, where.decimals);
  const amount = fromBaseUnits(units, where.decimals);
  if (!TOKEN_PROGRAMS.includes(where.token_program)) {
    throw new Error(`billing names ${where.token_program} as the token program: not an SPL token program`);
  }
  const mint = new PublicKey(where.mint);
  const program = new PublicKey(where.token_program);
  const treasuryAccount = getAssociatedTokenAddressSync(mint, new PublicKey(where.treasury), true, program);
  if (treasuryAccount.toBase58() !== where.treasury_token_account) {
    throw new Error(
      `billing's treasury token account ${where.treasury_token_account} is not the treasury's associated token ` +
        `account of the mint (${treasuryAccount.toBase58()}): nothing sent`,
    );
  }
  const connection = new Connection(opts.rpcUrl, where.commitment);
  const source = getAssociatedTokenAddressSync(mint, opts.keypair.publicKey, false, program);
  const tx = new Transaction().add(
    createTransferCheckedInstruction(
      source,
      mint,
      treasuryAccount,
      opts.keypair.publicKey,
      units,
      where.decimals,
      [],
      program,
    ),
  );
  // Signed here, so the signature is known before sending: a send whose confirmation times out can still be claimed.
  const latest = await connection.getLatestBlockhash(where.commitment);
  tx.recentBlockhash = latest.blockhash;
  tx.feePayer = opts.keypair.publicKey;
  tx.sign(opts.keypair);
  const signature = bs58.encode(tx.signature as Buffer);
  // A refusal here (the node's simulation: too few tokens, no token account) sent nothing.
  await connection.sendRawTransaction(tx.serialize(), { preflightCommitment: where.commitment });
  let outcome: Awaited<ReturnType<Connection['confirmTransaction']>>;
  try {
    outcome = await connection.confirmTransaction({ signature, ...latest }, where.commitment);
  } catch (err) {
    throw new DepositClaimError(signature, opts.walletId, amount, err, 'confirm');
  }
  if (outcome.value.err) {
    throw new Error(
      `the transfer ${signature} failed on chain (${JSON.stringify(outcome.value.err)}): no tokens moved`,
    );
  }
  try {
    return await claim(opts.billing, opts.walletId, signature, amount, opts.claimTimeoutMs);
  } catch (err) {
    throw new DepositClaimError(signature, opts.walletId, amount, err);
  }
}
