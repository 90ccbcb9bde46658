/**
 * Reading SPL Token accounts and mints out of raw account data, and rendering
 * accounts and token amounts the way Solana's JSON-RPC does.
 */
import { getBase58Decoder, getBase64Decoder } from '@solana/kit';

export const TOKEN_PROGRAM = 'TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA';
const TOKEN_2022_PROGRAM = 'TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb';
const TOKEN_ACCOUNT_LEN = 165;
const MINT_LEN = 82;

const b58 = getBase58Decoder();
const b64 = getBase64Decoder();

/** Raw account as the chain stores it. */
export interface RawAccount {
  lamports: bigint;
  data: Uint8Array;
  owner: string;
  executable: boolean;
}

/** A parsed SPL token account. */
export interface TokenAccountInfo {
  mint: string;
  owner: string;
  amount: bigint;
  state: 'initialized' | 'frozen';
  isNative: boolean;
  programId: string;
}

/** A parsed SPL mint. */
export interface MintInfo {
  decimals: number;
  supply: bigint;
  mintAuthority: string | null;
  freezeAuthority: string | null;
  programId: string;
}

function isTokenProgram(owner: string): boolean {
  return owner === TOKEN_PROGRAM || owner === TOKEN_2022_PROGRAM;
}

function u64(data: Uint8Array, offset: number): bigint {
  return new DataView(data.buffer, data.byteOffset, data.byteLength).getBigUint64(offset, true);
}

function optionKey(data: Uint8Array, offset: number): string | null {
  const tag = new DataView(data.buffer, data.byteOffset, data.byteLength).getUint32(offset, true);
  return tag === 1 ? b58.decode(data.subarray(offset + 4, offset + 36)) : null;
}

/** The token account in `acc`, or null when it is not an initialized SPL token account. */
export function parseTokenAccount(acc: RawAccount | null): TokenAccountInfo | null {
  if (!acc || !isTokenProgram(acc.owner) || acc.data.length < TOKEN_ACCOUNT_LEN) return null;
  // Token-2022 accounts with extensions carry an account-type byte (2 = account) right after the base layout.
  if (acc.data.length > TOKEN_ACCOUNT_LEN && acc.data[TOKEN_ACCOUNT_LEN] !== 2) return null;
  const state = acc.data[108];
  if (state !== 1 && state !== 2) return null;
  return {
    mint: b58.decode(acc.data.subarray(0, 32)),
    owner: b58.decode(acc.data.subarray(32, 64)),
    amount: u64(acc.data, 64),
    state: state === 2 ? 'frozen' : 'initialized',
    isNative: new DataView(acc.data.buffer, acc.data.byteOffset).getUint32(109, true) === 1,
    programId: acc.owner,
  };
}

/** The mint in `acc`, or null when it is not an initialized SPL mint. */
export function parseMint(acc: RawAccount | null): MintInfo | null {
  if (!acc || !isTokenProgram(acc.owner)) return null;
  // A plain mint is 82 bytes; a Token-2022 mint with extensions carries account-type byte 1 at offset 165.
  const plain = acc.data.length === MINT_LEN;
  if (!plain && !(acc.data.length > TOKEN_ACCOUNT_LEN && acc.data[TOKEN_ACCOUNT_LEN] === 1)) return null;
  if (acc.data[45] !== 1) return null;
  return {
    mintAuthority: optionKey(acc.data, 0),
    supply: u64(acc.data, 36),
    decimals: acc.data[44] ?? 0,
    freezeAuthority: optionKey(acc.data, 46),
    programId: acc.owner,
  };
}

/** `amount` base units with `decimals` as Solana's `uiAmountString` ("12.5", "0", "100"). */
function uiAmountString(amount: bigint, decimals: number): string {
  if (decimals === 0) return amount.toString();
  const s = amount.toString().padStart(decimals + 1, '0');
  const whole = s.slice(0, -decimals);
  const frac = s.slice(-decimals).replace(/0+$/, '');
  return frac ? `${whole}.${frac}` : whole;
}

/** The RPC `UiTokenAmount` object. */
export function uiTokenAmount(amount: bigint, decimals: number) {
  const str = uiAmountString(amount, decimals);
  return { amount: amount.toString(), decimals, uiAmount: Number(str), uiAmountString: str };
}

export type AccountEncoding = 'base64' | 'base58' | 'base64+zstd' | 'jsonParsed';

/**
 * An account as `getAccountInfo` renders it. `decimalsOf` looks up a mint's decimals
 * (for jsonParsed token accounts).
 */
export function renderAccount(
  acc: RawAccount,
  encoding: AccountEncoding,
  decimalsOf: (mint: string) => number,
  dataSlice?: { offset: number; length: number },
) {
  const data = dataSlice ? acc.data.subarray(dataSlice.offset, dataSlice.offset + dataSlice.length) : acc.data;
  const base = {
    executable: acc.executable,
    lamports: Number(acc.lamports),
    owner: acc.owner,
    rentEpoch: 0,
    space: acc.data.length,
  };
  if (encoding === 'jsonParsed' && !dataSlice) {
    const parsed = jsonParsedData(acc, decimalsOf);
    if (parsed) return { ...base, data: parsed };
  }
  if (encoding === 'base58') return { ...base, data: [b58.decode(data), 'base58'] };
  // base64+zstd is answered uncompressed (as plain base64), which clients accept.
  return { ...base, data: [b64.decode(data), 'base64'] };
}

function jsonParsedData(acc: RawAccount, decimalsOf: (mint: string) => number) {
  const program = acc.owner === TOKEN_2022_PROGRAM ? 'spl-token-2022' : 'spl-token';
  const token = parseTokenAccount(acc);
  if (token) {
    return {
      program,
      space: acc.data.length,
      parsed: {
        type: 'account',
        info: {
          isNative: token.isNative,
          mint: token.mint,
          owner: token.owner,
          state: token.state,
          tokenAmount: uiTokenAmount(token.amount, decimalsOf(token.mint)),
        },
      },
    };
  }
  const mint = parseMint(acc);
  if (mint) {
    return {
      program,
      space: acc.data.length,
      parsed: {
        type: 'mint',
        info: {
          decimals: mint.decimals,
          freezeAuthority: mint.freezeAuthority,
          isInitialized: true,
          mintAuthority: mint.mintAuthority,
          supply: mint.supply.toString(),
        },
      },
    };
  }
  return null;
}
