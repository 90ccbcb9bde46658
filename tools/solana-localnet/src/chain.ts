/**
 * The local chain: a litesvm instance (the real SVM and SPL programs) plus what
 * a validator adds around it: slots and block heights that advance, a window of
 * recent blockhashes (each valid for 150 blocks), a per-signature transaction
 * history with balances before and after, and commitment levels (a landed
 * transaction is `confirmed`, and `finalized` once its finality delay has passed).
 */
import { createHash } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { address, getBase58Decoder, type Transaction as KitTransaction, lamports } from '@solana/kit';
import { Keypair, PublicKey, SystemProgram, Transaction, type VersionedTransaction } from '@solana/web3.js';
import { LiteSVM } from 'litesvm';
import { parseMint, type RawAccount } from './accounts.ts';
import type { SimulationResult, TxRecord } from './chain-records.ts';
import { deserializeTransaction, simulateTransaction, submitTransaction } from './execute.ts';

/** Blocks a blockhash stays valid for (Solana's MAX_PROCESSING_AGE). */
const MAX_PROCESSING_AGE = 150;
export const SLOTS_PER_EPOCH = 432_000;
const FAUCET_LAMPORTS = 1_000_000_000_000_000n; // 1,000,000 SOL

export type Commitment = 'processed' | 'confirmed' | 'finalized';

export {
  LAMPORTS_PER_SIGNATURE,
  type SimulationResult,
  type TxRecord,
} from './chain-records.ts';
export { RpcError } from './rpc-error.ts';

const b58 = getBase58Decoder();

function nextHash(prev: string, slot: number): string {
  return b58.decode(createHash('sha256').update(`${prev}:${slot}`).digest());
}

/** Events: `transaction` (TxRecord landed), `finalized` (TxRecord), `slot` (number). */
export class LocalChain extends EventEmitter {
  svm: LiteSVM;
  slot = 1;
  latestBlockhash: string;
  genesisHash: string;
  faucet: Keypair;
  /** global finality delay in slots (0: every landed transaction is finalized at once) */
  finalityDelaySlots: number;
  txCount = 0;
  readonly history = new Map<string, TxRecord>();
  private readonly byAddress = new Map<string, string[]>();
  private readonly hashes = new Map<string, number>();
  private readonly pending = new Set<string>();
  private readonly holds = new Map<string, number>();

  constructor(opts: { finalityDelaySlots?: number; svm?: LiteSVM; faucet?: Keypair } = {}) {
    super();
    this.finalityDelaySlots = opts.finalityDelaySlots ?? 0;
    this.svm = (opts.svm ?? new LiteSVM()).withBlockhashCheck(false).withTransactionHistory(0n).withSigverify(true);
    this.faucet = opts.faucet ?? Keypair.generate();
    this.genesisHash = nextHash('genesis', Date.now());
    this.latestBlockhash = nextHash(this.genesisHash, this.slot);
    this.hashes.set(this.latestBlockhash, this.slot);
    if (!opts.svm) {
      this.svm.setAccount({
        address: address(this.faucet.publicKey.toBase58()),
        lamports: lamports(FAUCET_LAMPORTS),
        data: new Uint8Array(),
        executable: false,
        programAddress: address(SystemProgram.programId.toBase58()),
        space: 0n,
      });
    }
    this.syncClock();
  }

  /** Block height (one block per slot here). */
  get blockHeight(): number {
    return this.slot;
  }

  /** The latest blockhash and the last block height at which it is still accepted. */
  latest(): { blockhash: string; lastValidBlockHeight: number } {
    return { blockhash: this.latestBlockhash, lastValidBlockHeight: this.slot + MAX_PROCESSING_AGE };
  }

  isBlockhashValid(hash: string): boolean {
    const s = this.hashes.get(hash);
    return s !== undefined && this.blockHeight <= s + MAX_PROCESSING_AGE;
  }

  /** Advances `n` slots: a new blockhash each slot, the clock, and finality of pending transactions. */
  advance(n = 1): void {
    if (n <= 0) return;
    const keep = MAX_PROCESSING_AGE + 50;
    if (n > keep) {
      this.slot += n - keep;
      n = keep;
    }
    for (let i = 0; i < n; i++) {
      this.slot++;
      this.latestBlockhash = nextHash(this.latestBlockhash, this.slot);
      this.hashes.set(this.latestBlockhash, this.slot);
    }
    for (const [h, s] of this.hashes) {
      if (s >= this.slot - keep) break;
      this.hashes.delete(h);
    }
    this.syncClock();
    for (const sig of this.pending) {
      const rec = this.history.get(sig);
      if (rec && rec.finalizedAt <= this.slot) this.markFinal(rec);
    }
    this.emit('slot', this.slot);
  }

  /** Keeps transactions touching `addr` (any account key) confirmed but not finalized for `slots` slots. */
  setHold(addr: string, slots: number): void {
    if (slots <= 0) this.holds.delete(addr);
    else this.holds.set(addr, slots);
  }

  /** Finalizes one pending transaction now, or all of them; returns how many. */
  finalizeNow(signature?: string): number {
    const sigs = signature ? [signature] : [...this.pending];
    let n = 0;
    for (const sig of sigs) {
      const rec = this.history.get(sig);
      if (rec && this.pending.has(sig)) {
        rec.finalizedAt = this.slot;
        this.markFinal(rec);
        n++;
      }
    }
    return n;
  }

  isFinal(rec: TxRecord): boolean {
    return rec.finalizedAt <= this.slot && !this.pending.has(rec.signature);
  }

  /** Whether `rec` is visible at `commitment`. */
  visibleAt(rec: TxRecord, commitment: Commitment): boolean {
    return commitment !== 'finalized' || this.isFinal(rec);
  }

  /** Signatures of landed transactions that touched `addr`, oldest first. */
  signaturesFor(addr: string): readonly string[] {
    return this.byAddress.get(addr) ?? [];
  }

  account(addr: string): RawAccount | null {
    const a = this.svm.getAccount(address(addr));
    if (!a.exists) return null;
    return { lamports: a.lamports, data: new Uint8Array(a.data), owner: a.programAddress, executable: a.executable };
  }

  balance(addr: string): number {
    return Number(this.svm.getBalance(address(addr)) ?? 0n);
  }

  decimalsOf(mint: string): number {
    return parseMint(this.account(mint))?.decimals ?? 0;
  }

  minimumBalance(dataLen: number): number {
    return Number(this.svm.minimumBalanceForRentExemption(BigInt(dataLen)));
  }

  /** See submitTransaction. */
  submit(bytes: Uint8Array, opts: { skipPreflight?: boolean } = {}): string {
    return submitTransaction(this, bytes, opts);
  }

  /** Runs a transaction without committing it. */
  simulate(ktx: KitTransaction, sigVerify: boolean): SimulationResult {
    return simulateTransaction(this, ktx, sigVerify);
  }

  deserialize(bytes: Uint8Array): VersionedTransaction {
    return deserializeTransaction(bytes);
  }

  /** Finality delay (slots) of a transaction with these account keys: the global delay or a longer hold. */
  finalityDelayFor(keys: string[]): number {
    return Math.max(this.finalityDelaySlots, ...keys.map((k) => this.holds.get(k) ?? 0));
  }

  /** Sends `lamports` from the faucet to `to` in a real system transfer; returns its signature. */
  airdrop(to: string, amount: number): string {
    for (;;) {
      const tx = new Transaction({ feePayer: this.faucet.publicKey, recentBlockhash: this.latestBlockhash }).add(
        SystemProgram.transfer({ fromPubkey: this.faucet.publicKey, toPubkey: new PublicKey(to), lamports: amount }),
      );
      tx.sign(this.faucet);
      const sig = b58.decode(tx.signature!);
      // the same airdrop twice in one slot would be the same transaction: move to a new blockhash
      if (this.history.has(sig)) {
        this.advance(1);
        continue;
      }
      return this.submit(tx.serialize(), { skipPreflight: false });
    }
  }

  /** Adds a landed transaction to the history (also used when restoring saved state). */
  record(rec: TxRecord): void {
    this.history.set(rec.signature, rec);
    this.txCount++;
    for (const k of new Set(rec.keys)) {
      const list = this.byAddress.get(k);
      if (list) list.push(rec.signature);
      else this.byAddress.set(k, [rec.signature]);
    }
    if (rec.finalizedAt > this.slot) this.pending.add(rec.signature);
    this.emit('transaction', rec);
    if (rec.finalizedAt <= this.slot) this.emit('finalized', rec);
  }

  private markFinal(rec: TxRecord): void {
    this.pending.delete(rec.signature);
    this.emit('finalized', rec);
  }

  private syncClock(): void {
    const c = this.svm.getClock();
    c.slot = BigInt(this.slot);
    c.epoch = BigInt(Math.floor(this.slot / SLOTS_PER_EPOCH));
    c.unixTimestamp = BigInt(Math.floor(Date.now() / 1000));
    this.svm.setClock(c);
  }

  /** State beyond the SVM's own snapshot, for saving across restarts. */
  exportState() {
    return {
      genesisHash: this.genesisHash,
      slot: this.slot,
      latestBlockhash: this.latestBlockhash,
      hashes: [...this.hashes],
      faucet: Array.from(this.faucet.secretKey),
      finalityDelaySlots: this.finalityDelaySlots,
      holds: [...this.holds],
      history: [...this.history.values()],
    };
  }

  /** Restores what `exportState` saved, into a chain built on the restored SVM. */
  importState(s: ReturnType<LocalChain['exportState']>): void {
    this.genesisHash = s.genesisHash;
    this.slot = s.slot;
    this.latestBlockhash = s.latestBlockhash;
    this.hashes.clear();
    for (const [h, slot] of s.hashes) this.hashes.set(h, slot);
    this.faucet = Keypair.fromSecretKey(Uint8Array.from(s.faucet));
    for (const [a, n] of s.holds) this.holds.set(a, n);
    for (const rec of s.history) this.record(rec);
    this.syncClock();
  }
}
