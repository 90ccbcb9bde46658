/**
 * The JSON-RPC methods the local chain serves: the subset of Solana's API that
 * `@solana/web3.js` 1.x `Connection` and `@solana/spl-token` use for mints,
 * token accounts, transfers and confirmation, plus `localnet_*` test controls.
 */
import { address, getBase58Encoder, getTransactionDecoder } from '@solana/kit';
import { PublicKey, VersionedMessage } from '@solana/web3.js';
import {
  type AccountEncoding,
  parseMint,
  parseTokenAccount,
  renderAccount,
  TOKEN_PROGRAM,
  uiTokenAmount,
} from './accounts.ts';
import {
  type Commitment,
  LAMPORTS_PER_SIGNATURE,
  type LocalChain,
  RpcError,
  SLOTS_PER_EPOCH,
  type TxRecord,
} from './chain.ts';
import { renderTransaction, type TxEncoding } from './render-tx.ts';

const SOLANA_CORE_VERSION = '2.2.0';

type Params = unknown[];
type Config = Record<string, unknown>;
export type Handler = (params: Params) => unknown;

function invalid(message: string): RpcError {
  return new RpcError(-32602, `Invalid params: ${message}`);
}

function str(params: Params, i: number, what: string): string {
  const v = params[i];
  if (typeof v !== 'string') throw invalid(`${what} must be a string`);
  return v;
}

function pubkey(params: Params, i: number): string {
  const v = str(params, i, 'address');
  try {
    return new PublicKey(v).toBase58();
  } catch {
    throw invalid(`invalid address ${v}`);
  }
}

function cfg(params: Params, i: number): Config {
  const v = params[i];
  return v && typeof v === 'object' && !Array.isArray(v) ? (v as Config) : {};
}

function commitmentOf(c: Config): Commitment {
  const v = c.commitment;
  if (v === undefined) return 'finalized';
  if (v === 'processed' || v === 'confirmed' || v === 'finalized') return v;
  if (v === 'recent' || v === 'single') return 'processed';
  if (v === 'singleGossip') return 'confirmed';
  if (v === 'root' || v === 'max') return 'finalized';
  throw invalid(`unknown commitment ${String(v)}`);
}

function decodeWire(data: string, encoding: unknown): Uint8Array {
  if (encoding === 'base64') return Buffer.from(data, 'base64');
  if (encoding === undefined || encoding === 'base58') {
    try {
      return new Uint8Array(getBase58Encoder().encode(data));
    } catch {
      throw invalid('invalid base58 encoding');
    }
  }
  throw invalid(`unsupported encoding ${String(encoding)}`);
}

/** A signature status as `getSignatureStatuses` reports it. */
function signatureStatus(chain: LocalChain, rec: TxRecord) {
  const final = chain.isFinal(rec);
  return {
    slot: rec.slot,
    confirmations: final ? null : Math.max(1, Math.min(31, chain.slot - rec.slot)),
    err: rec.err,
    status: rec.err === null ? { Ok: null } : { Err: rec.err },
    confirmationStatus: final ? 'finalized' : 'confirmed',
  };
}

/** The method table. */
export function createHandlers(chain: LocalChain): Record<string, Handler> {
  const ctx = () => ({ slot: chain.slot, apiVersion: SOLANA_CORE_VERSION });
  const withCtx = (value: unknown) => ({ context: ctx(), value });
  const accountValue = (addr: string, c: Config) => {
    const acc = chain.account(addr);
    if (!acc) return null;
    const slice = c.dataSlice as { offset: number; length: number } | undefined;
    return renderAccount(acc, (c.encoding as AccountEncoding) ?? 'base64', (m) => chain.decimalsOf(m), slice);
  };
  const tokenAccount = (addr: string) => {
    const t = parseTokenAccount(chain.account(addr));
    if (!t) throw invalid('could not find account, or it is not a token account');
    return t;
  };

  return {
    getHealth: () => 'ok',
    getVersion: () => ({ 'solana-core': SOLANA_CORE_VERSION, 'feature-set': 0 }),
    getGenesisHash: () => chain.genesisHash,
    getIdentity: () => ({ identity: chain.faucet.publicKey.toBase58() }),
    getSlot: () => chain.slot,
    getBlockHeight: () => chain.blockHeight,
    getTransactionCount: () => chain.txCount,
    getFirstAvailableBlock: () => 0,
    minimumLedgerSlot: () => 0,
    getEpochInfo: () => ({
      absoluteSlot: chain.slot,
      blockHeight: chain.blockHeight,
      epoch: Math.floor(chain.slot / SLOTS_PER_EPOCH),
      slotIndex: chain.slot % SLOTS_PER_EPOCH,
      slotsInEpoch: SLOTS_PER_EPOCH,
      transactionCount: chain.txCount,
    }),
    getEpochSchedule: () => ({
      slotsPerEpoch: SLOTS_PER_EPOCH,
      leaderScheduleSlotOffset: SLOTS_PER_EPOCH,
      warmup: false,
      firstNormalEpoch: 0,
      firstNormalSlot: 0,
    }),
    getLatestBlockhash: () => withCtx(chain.latest()),
    isBlockhashValid: (p) => withCtx(chain.isBlockhashValid(str(p, 0, 'blockhash'))),
    getFeeForMessage: (p) => {
      let msg: VersionedMessage;
      try {
        msg = VersionedMessage.deserialize(Buffer.from(str(p, 0, 'message'), 'base64'));
      } catch {
        throw invalid('invalid message');
      }
      const fee = chain.isBlockhashValid(msg.recentBlockhash)
        ? msg.header.numRequiredSignatures * LAMPORTS_PER_SIGNATURE
        : null;
      return withCtx(fee);
    },
    getRecentPrioritizationFees: () => [],
    getMinimumBalanceForRentExemption: (p) => {
      const len = p[0];
      if (typeof len !== 'number' || !Number.isInteger(len) || len < 0) throw invalid('data length must be a number');
      return chain.minimumBalance(len);
    },
    getBalance: (p) => withCtx(chain.balance(pubkey(p, 0))),
    getAccountInfo: (p) => withCtx(accountValue(pubkey(p, 0), cfg(p, 1))),
    getMultipleAccounts: (p) => {
      const list = p[0];
      if (!Array.isArray(list) || list.length > 100) throw invalid('expected an array of at most 100 addresses');
      const c = cfg(p, 1);
      return withCtx(list.map((_, i) => accountValue(pubkey(list, i), c)));
    },
    getTokenAccountBalance: (p) => {
      const t = tokenAccount(pubkey(p, 0));
      return withCtx(uiTokenAmount(t.amount, chain.decimalsOf(t.mint)));
    },
    getTokenSupply: (p) => {
      const m = parseMint(chain.account(pubkey(p, 0)));
      if (!m) throw invalid('not a Token mint');
      return withCtx(uiTokenAmount(m.supply, m.decimals));
    },
    getTokenAccountsByOwner: (p) => {
      const owner = pubkey(p, 0);
      const filter = cfg(p, 1);
      const c = cfg(p, 2);
      const program = typeof filter.programId === 'string' ? filter.programId : TOKEN_PROGRAM;
      const mint = typeof filter.mint === 'string' ? filter.mint : undefined;
      if (!mint && typeof filter.programId !== 'string') throw invalid('expected a mint or programId filter');
      const value = [];
      for (const acc of chain.svm.getProgramAccounts(address(program))) {
        const raw = {
          lamports: acc.lamports,
          data: new Uint8Array(acc.data),
          owner: acc.programAddress,
          executable: false,
        };
        const t = parseTokenAccount(raw);
        if (!t || t.owner !== owner || (mint && t.mint !== mint)) continue;
        value.push({
          pubkey: acc.address,
          account: renderAccount(raw, (c.encoding as AccountEncoding) ?? 'base64', (m) => chain.decimalsOf(m)),
        });
      }
      return withCtx(value);
    },
    requestAirdrop: (p) => {
      const amount = p[1];
      if (typeof amount !== 'number' || !Number.isSafeInteger(amount) || amount <= 0) throw invalid('lamports');
      return chain.airdrop(pubkey(p, 0), amount);
    },
    sendTransaction: (p) => {
      const c = cfg(p, 1);
      return chain.submit(decodeWire(str(p, 0, 'transaction'), c.encoding), {
        skipPreflight: c.skipPreflight === true,
      });
    },
    simulateTransaction: (p) => {
      const c = cfg(p, 1);
      const bytes = decodeWire(str(p, 0, 'transaction'), c.encoding);
      const vtx = chain.deserialize(bytes);
      const replace = c.replaceRecentBlockhash === true;
      if (!replace && !chain.isBlockhashValid(vtx.message.recentBlockhash)) {
        return withCtx({ err: 'BlockhashNotFound', logs: [], accounts: null, unitsConsumed: 0, returnData: null });
      }
      const sim = chain.simulate(getTransactionDecoder().decode(bytes), c.sigVerify === true);
      return withCtx({
        err: sim.err,
        logs: sim.logs,
        accounts: null,
        unitsConsumed: sim.unitsConsumed,
        returnData: null,
        ...(replace ? { replacementBlockhash: chain.latest() } : {}),
      });
    },
    getSignatureStatuses: (p) => {
      const sigs = p[0];
      if (!Array.isArray(sigs) || sigs.length > 256) throw invalid('expected an array of at most 256 signatures');
      return withCtx(
        sigs.map((s) => {
          const rec = typeof s === 'string' ? chain.history.get(s) : undefined;
          return rec ? signatureStatus(chain, rec) : null;
        }),
      );
    },
    getTransaction: (p) => {
      const sig = str(p, 0, 'signature');
      const c = typeof p[1] === 'string' ? { encoding: p[1] } : cfg(p, 1);
      const rec = chain.history.get(sig);
      if (!rec || !chain.visibleAt(rec, commitmentOf(c))) return null;
      if (rec.version !== 'legacy' && c.maxSupportedTransactionVersion === undefined) {
        throw new RpcError(
          -32015,
          `Transaction version (${rec.version}) is not supported by the requesting client. Please try the request again with the following configuration parameter: "maxSupportedTransactionVersion": 0`,
        );
      }
      return renderTransaction(rec, (c.encoding as TxEncoding) ?? 'json');
    },
    getSignaturesForAddress: (p) => {
      const addr = pubkey(p, 0);
      const c = cfg(p, 1);
      const limit = typeof c.limit === 'number' ? Math.min(1000, Math.max(1, c.limit)) : 1000;
      const commitment = commitmentOf(c);
      const sigs = [...chain.signaturesFor(addr)].reverse();
      let start = 0;
      if (typeof c.before === 'string') start = sigs.indexOf(c.before) + 1;
      const out = [];
      for (const s of sigs.slice(start)) {
        if (s === c.until || out.length >= limit) break;
        const rec = chain.history.get(s)!;
        if (!chain.visibleAt(rec, commitment)) continue;
        const st = signatureStatus(chain, rec);
        out.push({
          signature: s,
          slot: rec.slot,
          err: rec.err,
          memo: null,
          blockTime: rec.blockTime,
          confirmationStatus: st.confirmationStatus,
        });
      }
      return out;
    },

    /** localnet_warp [slots]: advances the chain `slots` slots at once (expires blockhashes, finalizes). */
    localnet_warp: (p) => {
      const n = p[0];
      if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > 10_000_000)
        throw invalid('slots must be 1..10000000');
      chain.advance(n);
      return { slot: chain.slot, blockHeight: chain.blockHeight };
    },
    /** localnet_setFinalityDelay [{ slots, address? }]: per address (any account key of the tx) or global. */
    localnet_setFinalityDelay: (p) => {
      const c = cfg(p, 0);
      const slots = c.slots;
      if (typeof slots !== 'number' || !Number.isInteger(slots) || slots < 0)
        throw invalid('slots must be a non-negative integer');
      if (c.address !== undefined) chain.setHold(pubkey([c.address], 0), slots);
      else chain.finalityDelaySlots = slots;
      return { slots, address: c.address ?? null };
    },
    /** localnet_finalize [signature?]: finalizes one pending transaction, or all, now. */
    localnet_finalize: (p) => ({ finalized: chain.finalizeNow(typeof p[0] === 'string' ? p[0] : undefined) }),
    localnet_info: () => ({
      slot: chain.slot,
      blockHeight: chain.blockHeight,
      transactions: chain.txCount,
      finalityDelaySlots: chain.finalityDelaySlots,
      faucet: chain.faucet.publicKey.toBase58(),
    }),
  };
}
