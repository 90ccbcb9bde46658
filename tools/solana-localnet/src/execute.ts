/**
 * Executing transactions like a validator: decoding, preflight (simulation),
 * the blockhash and duplicate checks, running them in the SVM, and recording
 * what landed with balances and token balances before and after.
 */
import { getBase58Decoder, getTransactionDecoder, type Transaction as KitTransaction } from '@solana/kit';
import { AddressLookupTableAccount, VersionedTransaction } from '@solana/web3.js';
import type { LiteSVM } from 'litesvm';
import { FailedTransactionMetadata, type TransactionMetadata } from 'litesvm';
import { parseTokenAccount, type RawAccount, uiTokenAmount } from './accounts.ts';
import { LAMPORTS_PER_SIGNATURE, type SimulationResult, type TokenBalance, type TxRecord } from './chain-records.ts';
import { RpcError } from './rpc-error.ts';
import { describeTxError, landsOnChain, type TxErrorJson, txErrorJson } from './tx-errors.ts';

/** What executing needs of the chain (LocalChain in chain.ts is one): its SVM, clock, history and balances. */
export interface ExecutionChain {
  readonly svm: LiteSVM;
  readonly slot: number;
  readonly history: Map<string, TxRecord>;
  isBlockhashValid(hash: string): boolean;
  account(addr: string): RawAccount | null;
  balance(addr: string): number;
  decimalsOf(mint: string): number;
  finalityDelayFor(keys: string[]): number;
  record(rec: TxRecord): void;
}

const b58 = getBase58Decoder();
const kitDecoder = getTransactionDecoder();

/**
 * Submits a signed transaction (wire bytes) like a validator's `sendTransaction`.
 * With preflight, anything that would not succeed is refused with an RpcError and
 * nothing lands; without it, such transactions are accepted and dropped (or land
 * as failed, with their fee charged, when the failure happens during execution).
 */
export function submitTransaction(
  chain: ExecutionChain,
  bytes: Uint8Array,
  opts: { skipPreflight?: boolean } = {},
): string {
  const preflight = !opts.skipPreflight;
  const vtx = deserializeTransaction(bytes);
  const signature = b58.decode(vtx.signatures[0]!);
  const refuse = (err: TxErrorJson, text: string, logs: string[] = [], units = 0) =>
    new RpcError(-32002, `Transaction simulation failed: ${text}`, {
      err,
      logs,
      accounts: null,
      unitsConsumed: units,
      returnData: null,
      innerInstructions: null,
    });
  if (chain.history.has(signature)) {
    if (preflight) throw refuse('AlreadyProcessed', 'This transaction has already been processed');
    return signature;
  }
  if (!chain.isBlockhashValid(vtx.message.recentBlockhash)) {
    if (preflight) throw refuse('BlockhashNotFound', 'Blockhash not found');
    return signature;
  }
  const ktx = kitDecoder.decode(bytes);
  if (preflight) {
    const sim = simulateTransaction(chain, ktx, true);
    if (sim.err === 'SignatureFailure') throw new RpcError(-32003, 'Transaction signature verification failure');
    if (sim.err) throw refuse(sim.err, describeTxError(sim.err), sim.logs, sim.unitsConsumed);
  }
  const { keys, loaded } = resolveKeys(chain, vtx);
  const preBalances = keys.map((k) => chain.balance(k));
  const preTokenBalances = tokenBalances(chain, keys);
  let result: TransactionMetadata | FailedTransactionMetadata;
  try {
    result = chain.svm.sendTransaction(ktx);
  } catch {
    // not fully signed: a validator drops it
    if (preflight) throw new RpcError(-32003, 'Transaction signature verification failure');
    return signature;
  }
  let err: TxErrorJson | null = null;
  let meta: TransactionMetadata;
  if (result instanceof FailedTransactionMetadata) {
    err = txErrorJson(result);
    meta = result.meta();
    if (!landsOnChain(err)) return signature;
  } else {
    meta = result;
  }
  const postBalances = keys.map((k) => chain.balance(k));
  const numSigs = vtx.message.header.numRequiredSignatures;
  const rec: TxRecord = {
    signature,
    wire: Buffer.from(bytes).toString('base64'),
    version: vtx.version,
    slot: chain.slot,
    blockTime: Math.floor(Date.now() / 1000),
    keys,
    loaded,
    err,
    fee: err ? Math.max(0, (preBalances[0] ?? 0) - (postBalances[0] ?? 0)) : numSigs * LAMPORTS_PER_SIGNATURE,
    preBalances,
    postBalances,
    preTokenBalances,
    postTokenBalances: tokenBalances(chain, keys),
    logs: meta.logs(),
    innerInstructions: meta
      .innerInstructions()
      .map((list, index) => ({
        index,
        instructions: list.map((ix) => ({
          programIdIndex: ix.instruction().programIdIndex(),
          accounts: [...ix.instruction().accounts()],
          data: b58.decode(ix.instruction().data()),
          stackHeight: ix.stackHeight(),
        })),
      }))
      .filter((x) => x.instructions.length > 0),
    computeUnitsConsumed: Number(meta.computeUnitsConsumed()),
    finalizedAt: chain.slot + chain.finalityDelayFor(keys),
  };
  chain.record(rec);
  return signature;
}

/** Runs a transaction without committing it. */
export function simulateTransaction(chain: ExecutionChain, ktx: KitTransaction, sigVerify: boolean): SimulationResult {
  if (!sigVerify) chain.svm.withSigverify(false);
  try {
    const r = chain.svm.simulateTransaction(ktx);
    const meta = r instanceof FailedTransactionMetadata ? r.meta() : r.meta();
    return {
      err: r instanceof FailedTransactionMetadata ? txErrorJson(r) : null,
      logs: meta.logs(),
      unitsConsumed: Number(meta.computeUnitsConsumed()),
    };
  } catch {
    return { err: 'SignatureFailure', logs: [], unitsConsumed: 0 };
  } finally {
    if (!sigVerify) chain.svm.withSigverify(true);
  }
}

export function deserializeTransaction(bytes: Uint8Array): VersionedTransaction {
  try {
    const vtx = VersionedTransaction.deserialize(bytes);
    if (!vtx.signatures[0]) throw new Error('no signatures');
    return vtx;
  } catch (e) {
    throw new RpcError(-32602, `invalid transaction: ${(e as Error).message}`);
  }
}

/** The transaction's account keys, with keys from address lookup tables resolved when the tables exist. */
function resolveKeys(
  chain: ExecutionChain,
  vtx: VersionedTransaction,
): { keys: string[]; loaded: { writable: string[]; readonly: string[] } } {
  const msg = vtx.message;
  const tables: AddressLookupTableAccount[] = [];
  for (const l of msg.addressTableLookups) {
    const acc = chain.account(l.accountKey.toBase58());
    if (!acc) return { keys: msg.staticAccountKeys.map((k) => k.toBase58()), loaded: { writable: [], readonly: [] } };
    tables.push(
      new AddressLookupTableAccount({ key: l.accountKey, state: AddressLookupTableAccount.deserialize(acc.data) }),
    );
  }
  const ak = msg.getAccountKeys({ addressLookupTableAccounts: tables });
  const writable = (ak.accountKeysFromLookups?.writable ?? []).map((k) => k.toBase58());
  const readonly = (ak.accountKeysFromLookups?.readonly ?? []).map((k) => k.toBase58());
  return {
    keys: [...ak.staticAccountKeys.map((k) => k.toBase58()), ...writable, ...readonly],
    loaded: { writable, readonly },
  };
}

function tokenBalances(chain: ExecutionChain, keys: string[]): TokenBalance[] {
  const out: TokenBalance[] = [];
  keys.forEach((k, accountIndex) => {
    const t = parseTokenAccount(chain.account(k));
    if (t) {
      out.push({
        accountIndex,
        mint: t.mint,
        owner: t.owner,
        programId: t.programId,
        uiTokenAmount: uiTokenAmount(t.amount, chain.decimalsOf(t.mint)),
      });
    }
  });
  return out;
}
