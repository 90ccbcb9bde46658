/**
 * Renders a landed transaction the way `getTransaction` answers it, in the
 * `json`, `jsonParsed` (instructions partially decoded: program, accounts,
 * data), `base64` and `base58` encodings.
 */
import { getBase58Decoder } from '@solana/kit';
import { VersionedTransaction } from '@solana/web3.js';
import type { TxRecord } from './chain.ts';

export type TxEncoding = 'json' | 'jsonParsed' | 'base64' | 'base58';

const b58 = getBase58Decoder();

/** The `getTransaction` result for `rec`. */
export function renderTransaction(rec: TxRecord, encoding: TxEncoding) {
  const bytes = Buffer.from(rec.wire, 'base64');
  const vtx = VersionedTransaction.deserialize(bytes);
  const msg = vtx.message;
  const keys = rec.keys;
  const parsed = encoding === 'jsonParsed';
  const meta = {
    err: rec.err,
    status: rec.err === null ? { Ok: null } : { Err: rec.err },
    fee: rec.fee,
    preBalances: rec.preBalances,
    postBalances: rec.postBalances,
    innerInstructions: rec.innerInstructions.map((group) => ({
      index: group.index,
      instructions: group.instructions.map((ix) =>
        parsed
          ? {
              programId: keys[ix.programIdIndex],
              accounts: ix.accounts.map((i) => keys[i]),
              data: ix.data,
              stackHeight: ix.stackHeight,
            }
          : ix,
      ),
    })),
    logMessages: rec.logs,
    preTokenBalances: rec.preTokenBalances,
    postTokenBalances: rec.postTokenBalances,
    rewards: [],
    loadedAddresses: rec.loaded,
    computeUnitsConsumed: rec.computeUnitsConsumed,
  };
  const lookups =
    rec.version !== 'legacy'
      ? {
          addressTableLookups: msg.addressTableLookups.map((l) => ({
            accountKey: l.accountKey.toBase58(),
            writableIndexes: l.writableIndexes,
            readonlyIndexes: l.readonlyIndexes,
          })),
        }
      : {};
  const signatures = vtx.signatures.map((s) => b58.decode(s));
  let transaction: unknown;
  if (encoding === 'base64') transaction = [rec.wire, 'base64'];
  else if (encoding === 'base58') transaction = [b58.decode(bytes), 'base58'];
  else if (parsed) {
    const staticCount = msg.staticAccountKeys.length;
    transaction = {
      signatures,
      message: {
        accountKeys: keys.map((pubkey, i) => ({
          pubkey,
          signer: msg.isAccountSigner(i),
          writable: msg.isAccountWritable(i),
          source: i < staticCount ? 'transaction' : 'lookupTable',
        })),
        instructions: msg.compiledInstructions.map((ix) => ({
          programId: keys[ix.programIdIndex],
          accounts: ix.accountKeyIndexes.map((i) => keys[i]),
          data: b58.decode(ix.data),
          stackHeight: null,
        })),
        recentBlockhash: msg.recentBlockhash,
        ...lookups,
      },
    };
  } else {
    transaction = {
      signatures,
      message: {
        accountKeys: msg.staticAccountKeys.map((k) => k.toBase58()),
        header: msg.header,
        instructions: msg.compiledInstructions.map((ix) => ({
          programIdIndex: ix.programIdIndex,
          accounts: ix.accountKeyIndexes,
          data: b58.decode(ix.data),
          stackHeight: null,
        })),
        recentBlockhash: msg.recentBlockhash,
        ...lookups,
      },
    };
  }
  return { slot: rec.slot, blockTime: rec.blockTime, meta, transaction, version: rec.version };
}
