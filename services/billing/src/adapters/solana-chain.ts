/**
 * The Chain adapter for Solana, with `@solana/web3.js` 1.x and
 * `@solana/spl-token` against a configured RPC node. Works the same against
 * the development localnet (tools/solana-localnet) and a real validator.
 *
 * Sending: transfers are sent without preflight, so a transfer that fails
 * lands on chain as failed (a definite outcome under its signature), and are
 * re-sent while their blockhash is valid. Confirmation polls
 * `getSignatureStatuses` (no WebSocket needed). A transfer counts as failed
 * only once it failed on chain, or once the finalized block height has passed
 * its last valid block height with no status (it can never land then).
 */
import { readFileSync } from 'node:fs';
import {
  createAssociatedTokenAccountIdempotentInstruction,
  createTransferCheckedInstruction,
  getAssociatedTokenAddressSync,
  unpackAccount,
  unpackMint,
} from '@solana/spl-token';
import {
  Connection,
  Keypair,
  PublicKey,
  type SignatureStatus,
  Transaction,
  TransactionInstruction,
  type TransactionSignature,
} from '@solana/web3.js';
import {
  base58Decode,
  base58Encode,
  type Chain,
  ChainRejection,
  ChainUnavailable,
  type Commitment,
  type DestinationProblem,
  type PreparedTransfer,
  type SignatureState,
  type SignedTransfer,
  type TransferOptions,
  type VerifiedDeposit,
} from '../domain/chain/index.ts';
import { checkDeposit } from './deposit-check.ts';
import { fromBaseUnits, toBaseUnits } from './token-units.ts';
import { accountDestinationProblem, knownDestinationProblem } from './unfit-destinations.ts';

const MEMO_PROGRAM = new PublicKey('MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr');

export interface SolanaChainOptions {
  rpcUrl: string;
  /** WebSocket URL (unused by this adapter's polling; passed to web3.js); derived from rpcUrl when absent */
  wsUrl?: string;
  /** platform token mint (base58) */
  mint: string;
  /** treasury keypair file (Solana CLI format: JSON array of 64 bytes); or `treasuryKeypair` */
  treasuryKeypairFile?: string;
  treasuryKeypair?: Keypair;
  /** when given, the keypair must belong to this address */
  treasuryAddress?: string;
  /** when given, the mint must have these decimals */
  decimals?: number;
  /** commitment for deposit verification and transfer confirmation (default finalized) */
  commitment?: 'processed' | 'confirmed' | 'finalized';
  /** per RPC request (default 10 s) */
  requestTimeoutMs?: number;
  /** how long sendAndConfirm waits before answering the state it has (default 120 s) */
  confirmTimeoutMs?: number;
  /** status polling interval (default 400 ms) */
  pollIntervalMs?: number;
  /** re-send interval while a transfer has not landed (default 2 s) */
  resendIntervalMs?: number;
}

const RANK: Record<string, number> = { processed: 1, confirmed: 2, finalized: 3 };

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Reads a Solana CLI keypair file. */
function readKeypairFile(path: string): Keypair {
  const bytes = JSON.parse(readFileSync(path, 'utf8')) as unknown;
  if (!Array.isArray(bytes) || bytes.length !== 64) throw new Error(`${path}: not a keypair file (64-byte JSON array)`);
  return Keypair.fromSecretKey(Uint8Array.from(bytes as number[]));
}

export class SolanaChain implements Chain {
  private platform: ReadonlySet<string> | undefined;

  private constructor(
    readonly connection: Connection,
    private readonly treasury: Keypair,
    private readonly mint: PublicKey,
    private readonly tokenProgram: PublicKey,
    private readonly mintDecimals: number,
    private readonly commitment: 'processed' | 'confirmed' | 'finalized',
    private readonly opts: SolanaChainOptions,
    /** The mint's mint and freeze authorities as read at start-up (destinationProblem reads them afresh). */
    private readonly authorities: readonly PublicKey[],
  ) {}

  /** Connects: reads the treasury key and the mint (decimals, token program). ChainUnavailable when the RPC fails. */
  static async connect(opts: SolanaChainOptions): Promise<SolanaChain> {
    const treasury = opts.treasuryKeypair ?? readKeypairFile(opts.treasuryKeypairFile ?? '');
    if (opts.treasuryAddress && treasury.publicKey.toBase58() !== opts.treasuryAddress) {
      throw new Error(`the treasury keypair belongs to ${treasury.publicKey.toBase58()}, not ${opts.treasuryAddress}`);
    }
    const timeout = opts.requestTimeoutMs ?? 10_000;
    const connection = new Connection(opts.rpcUrl, {
      commitment: opts.commitment ?? 'finalized',
      wsEndpoint: opts.wsUrl || undefined,
      disableRetryOnRateLimit: true,
      fetch: (input, init) => fetch(input, { ...init, signal: AbortSignal.timeout(timeout) }),
    });
    const mint = new PublicKey(opts.mint);
    const info = await call('getAccountInfo', () => connection.getAccountInfo(mint, 'confirmed'));
    if (!info) throw new Error(`mint ${opts.mint} does not exist on ${opts.rpcUrl}`);
    const unpacked = unpackMint(mint, info, info.owner);
    const decimals = unpacked.decimals;
    if (opts.decimals !== undefined && opts.decimals !== decimals) {
      throw new Error(`mint ${opts.mint} has ${decimals} decimals, configured ${opts.decimals}`);
    }
    return new SolanaChain(
      connection,
      treasury,
      mint,
      info.owner,
      decimals,
      opts.commitment ?? 'finalized',
      opts,
      authoritiesOf(unpacked),
    );
  }

  treasuryAddress(): string {
    return this.treasury.publicKey.toBase58();
  }

  mintAddress(): string {
    return this.mint.toBase58();
  }

  tokenProgramAddress(): string {
    return this.tokenProgram.toBase58();
  }

  decimals(): number {
    return this.mintDecimals;
  }

  /** The treasury's associated token account for the mint (where deposits go). */
  treasuryTokenAccount(): string {
    return this.ata(this.treasury.publicKey).toBase58();
  }

  async ping(): Promise<void> {
    await call('getSlot', () => this.connection.getSlot('processed'));
  }

  async verifyDeposit(signature: string, expectedSourceOwner: string, minAmount?: string): Promise<VerifiedDeposit> {
    if (base58Decode(signature)?.length !== 64) {
      throw new ChainRejection('NOT_FOUND', `${signature} is not a transaction signature`);
    }
    const minUnits = minAmount === undefined ? undefined : toBaseUnits(minAmount, this.mintDecimals);
    const commitment = this.commitment === 'processed' ? 'confirmed' : this.commitment; // getTransaction's minimum
    const tx = await call('getTransaction', () =>
      this.connection.getTransaction(signature, { commitment, maxSupportedTransactionVersion: 0 }),
    );
    if (!tx) {
      const { status } = await this.status(signature);
      if (!status) throw new ChainRejection('NOT_FOUND', `no transaction ${signature} on chain`);
      if (status.err) throw new ChainRejection('FAILED', `transaction failed: ${JSON.stringify(status.err)}`);
      throw new ChainRejection(
        'NOT_FINAL',
        `transaction is ${status.confirmationStatus ?? 'processed'}, not yet ${this.commitment}`,
      );
    }
    if (!tx.meta) throw new ChainRejection('NOT_FOUND', `transaction ${signature} has no status metadata`);
    if (tx.meta.err) throw new ChainRejection('FAILED', `transaction failed: ${JSON.stringify(tx.meta.err)}`);
    const units = checkDeposit(tx, {
      mint: this.mintAddress(),
      decimals: this.mintDecimals,
      treasury: this.treasuryAddress(),
      treasuryTokenAccount: this.treasuryTokenAccount(),
      expectedSourceOwner,
      minUnits,
    });
    return {
      signature,
      amount: fromBaseUnits(units, this.mintDecimals),
      sourceOwner: expectedSourceOwner,
      slot: tx.slot,
      blockTime: tx.blockTime ? new Date(tx.blockTime * 1000).toISOString() : null,
    };
  }

  /**
   * Builds and signs a transfer. Throws RangeError/TypeError for a bad amount or address, and RangeError when the
   * account fee leaves nothing to send. `memo` (default: a random reference) makes two otherwise identical transfers
   * in one blockhash window distinct transactions.
   */
  async prepareTransfer(
    destinationOwner: string,
    amount: string,
    options: TransferOptions & { memo?: string } = {},
  ): Promise<PreparedTransfer> {
    let owner: PublicKey;
    try {
      owner = new PublicKey(destinationOwner);
    } catch {
      throw new TypeError(`invalid destination address ${destinationOwner}`);
    }
    const asked = toBaseUnits(amount, this.mintDecimals);
    if (asked <= 0n) throw new RangeError('the transfer amount must be positive');
    const fee = toBaseUnits(options.accountFee ?? '0', this.mintDecimals);
    const destination = this.ata(owner);
    const [exists, latest] = await Promise.all([
      call('getAccountInfo', () => this.connection.getAccountInfo(destination, 'confirmed')),
      call('getLatestBlockhash', () => this.connection.getLatestBlockhash('confirmed')),
    ]);
    const units = exists ? asked : asked - fee;
    if (units <= 0n) {
      throw new RangeError(
        `${destinationOwner} has no token account yet: creating it costs ${fromBaseUnits(fee, this.mintDecimals)} tokens, ` +
          `which leaves nothing of ${amount} to send`,
      );
    }
    const payer = this.treasury.publicKey;
    const tx = new Transaction({ feePayer: payer, ...latest });
    if (!exists) {
      tx.add(
        createAssociatedTokenAccountIdempotentInstruction(payer, destination, owner, this.mint, this.tokenProgram),
      );
    }
    tx.add(
      createTransferCheckedInstruction(
        this.ata(payer),
        this.mint,
        destination,
        payer,
        units,
        this.mintDecimals,
        [],
        this.tokenProgram,
      ),
      new TransactionInstruction({
        programId: MEMO_PROGRAM,
        keys: [],
        data: Buffer.from(options.memo ?? `ref:${crypto.randomUUID()}`, 'utf8'),
      }),
    );
    tx.sign(this.treasury);
    return {
      signature: base58Encode(tx.signature!),
      serialized: tx.serialize().toString('base64'),
      lastValidBlockHeight: latest.lastValidBlockHeight,
      createsAccount: !exists,
      sent: fromBaseUnits(units, this.mintDecimals),
    };
  }

  /**
   * Sends (and re-sends, while not landed) without preflight, polling the status. Already landed: nothing is sent.
   * Resolves 'failed' when it failed on chain or can never land (finalized height past its last valid height).
   * When `confirmTimeoutMs` passes first, resolves the state it has ('unknown', 'processed' or 'confirmed'):
   * the caller keeps it pending and reconciles later. Throws ChainUnavailable when the RPC fails.
   */
  async sendAndConfirm(prepared: SignedTransfer): Promise<SignatureState> {
    const wire = Buffer.from(prepared.serialized, 'base64');
    const deadline = Date.now() + (this.opts.confirmTimeoutMs ?? 120_000);
    const poll = this.opts.pollIntervalMs ?? 400;
    const resendEvery = this.opts.resendIntervalMs ?? 2_000;
    let lastSend = 0;
    for (;;) {
      const { state, expired } = await this.signatureState(prepared.signature, prepared.lastValidBlockHeight);
      if (state === 'failed') return 'failed';
      if (state !== 'unknown' && RANK[state]! >= RANK[this.commitment]!) return state;
      if (state === 'unknown' && expired) return 'failed'; // can never land
      if (Date.now() >= deadline) return state;
      if (state === 'unknown' && Date.now() - lastSend >= resendEvery) {
        lastSend = Date.now();
        await call('sendTransaction', () =>
          this.connection.sendRawTransaction(wire, { skipPreflight: true, maxRetries: 0 }),
        );
      }
      await sleep(poll);
    }
  }

  async signatureState(
    signature: string,
    lastValidBlockHeight?: number,
  ): Promise<{ state: SignatureState; expired: boolean }> {
    // The finalized height (and its slot) first, the status second: a transaction that lands in between is then seen
    // as landed.
    const finalized =
      lastValidBlockHeight === undefined
        ? undefined
        : await call('getEpochInfo', () => this.connection.getEpochInfo('finalized'));
    const { status, slot } = await this.status(signature);
    const state = stateOf(status, this.commitment);
    if (state !== 'unknown' || !finalized || (finalized.blockHeight ?? 0) <= lastValidBlockHeight!) {
      return { state, expired: false };
    }
    // Unknown past its last valid height is expired, which gives its debit back, only when the node that answered had
    // seen that finalized slot: a node behind (one of several behind one address) may not have the transfer yet.
    return { state, expired: slot >= finalized.absoluteSlot };
  }

  async signatureStates(signatures: readonly string[]): Promise<SignatureState[]> {
    const states: SignatureState[] = [];
    // getSignatureStatuses takes at most 256 signatures a request.
    for (let i = 0; i < signatures.length; i += 256) {
      const chunk = signatures.slice(i, i + 256);
      const res = await call('getSignatureStatuses', () =>
        this.connection.getSignatureStatuses(chunk, { searchTransactionHistory: true }),
      );
      states.push(...res.value.map((status) => stateOf(status, this.commitment)));
    }
    return states;
  }

  async destinationProblem(address: string): Promise<DestinationProblem | null> {
    const key = new PublicKey(address);
    const known = this.knownDestinationProblem(address);
    if (known) return known;
    const [info, mintInfo] = await call('getMultipleAccountsInfo', () =>
      this.connection.getMultipleAccountsInfo([key, this.mint], 'confirmed'),
    );
    // The mint's authorities now, should they have changed since start-up.
    if (mintInfo && authoritiesOf(unpackMint(this.mint, mintInfo, this.tokenProgram)).some((a) => a.equals(key))) {
      return 'platform_address';
    }
    return accountDestinationProblem(info ?? null);
  }

  knownDestinationProblem(address: string): DestinationProblem | null {
    return knownDestinationProblem(address, this.platformAddresses());
  }

  /** The addresses the platform controls: the treasury and its token account, the mint and its authorities. */
  private platformAddresses(): ReadonlySet<string> {
    this.platform ??= new Set(
      [this.treasury.publicKey, this.ata(this.treasury.publicKey), this.mint, ...this.authorities].map((k) =>
        k.toBase58(),
      ),
    );
    return this.platform;
  }

  async tokenBalance(owner: string): Promise<string> {
    const account = this.ata(new PublicKey(owner));
    const info = await call('getAccountInfo', () => this.connection.getAccountInfo(account, this.commitment));
    if (!info) return '0';
    return fromBaseUnits(unpackAccount(account, info, this.tokenProgram).amount, this.mintDecimals);
  }

  async treasurySol(): Promise<string> {
    const lamports = await call('getBalance', () =>
      this.connection.getBalance(this.treasury.publicKey, this.commitment),
    );
    return fromBaseUnits(BigInt(lamports), 9);
  }

  private ata(owner: PublicKey): PublicKey {
    return getAssociatedTokenAddressSync(this.mint, owner, true, this.tokenProgram);
  }

  /** A signature's status (null: unknown to the node) and the slot the node answered at. */
  private async status(signature: TransactionSignature) {
    const res = await call('getSignatureStatuses', () =>
      this.connection.getSignatureStatuses([signature], { searchTransactionHistory: true }),
    );
    return { status: res.value[0] ?? null, slot: res.context.slot };
  }
}

/**
 * A signature's state from its status (none: unknown to the node). A failure counts only once it is as final as a
 * success must be (`commitment`): one seen on a fork that is then dropped could still land on another while its
 * blockhash is valid (anyone may re-send the signed bytes), and a debit reversed for it would be paid twice. Until
 * then it is in progress at the level it was seen at.
 */
function stateOf(status: SignatureStatus | null, commitment: Commitment): SignatureState {
  if (!status) return 'unknown';
  const seenAt = status.confirmationStatus ?? 'processed';
  if (!status.err) return seenAt;
  return RANK[seenAt]! >= RANK[commitment]! ? 'failed' : seenAt;
}

/** A mint's mint and freeze authorities (none, one or two). */
function authoritiesOf(mint: { mintAuthority: PublicKey | null; freezeAuthority: PublicKey | null }): PublicKey[] {
  return [mint.mintAuthority, mint.freezeAuthority].filter((k): k is PublicKey => k !== null);
}

/** Runs one RPC call; any failure becomes ChainUnavailable. */
async function call<T>(what: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    throw new ChainUnavailable(`Solana RPC ${what} failed: ${(e as Error).message}`, { cause: e });
  }
}
