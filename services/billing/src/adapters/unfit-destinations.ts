/**
 * Solana addresses a withdrawal or payout must never be sent to (chain.ts `DestinationProblem`), decided without the
 * chain: well-known programs (whether or not the chain has them deployed), burn addresses and the platform's own
 * addresses; and, from an account the chain holds, program-owned and token-program accounts.
 *
 * Tokens are paid to the destination owner's associated token account, so paying the treasury's owner address would
 * move tokens from the treasury to itself while billing counted them as paid out; paying the mint, its authorities
 * or a burn address would leave them where nobody (or only the platform) can spend them.
 */
import { TOKEN_2022_PROGRAM_ID, TOKEN_PROGRAM_ID } from '@solana/spl-token';
import type { AccountInfo, PublicKey } from '@solana/web3.js';
import type { DestinationProblem } from '../domain/chain/index.ts';

const SYSTEM_PROGRAM = '11111111111111111111111111111111';

/**
 * Addresses that destroy what is sent to them. Solana has one by convention, the incinerator (the runtime burns the
 * lamports it holds at the end of each transaction; tokens sent to its token account can never be moved).
 */
const BURN_ADDRESSES: readonly string[] = ['1nc1nerator11111111111111111111111111111111'];

/** Programs, loaders and sysvars of every Solana cluster: none is an owner who could spend tokens. */
const WELL_KNOWN_PROGRAMS: readonly string[] = [
  'TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA', // SPL Token
  'TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb', // SPL Token-2022
  'ATokenGPvbdGVxr1b2hvZbsiqW5xWH25efTNsLJA8knL', // associated token accounts
  'MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr', // memo v2
  'Memo1UhkJRfHyvLMcVucJwxXeuD728EqVDDwQDxFMNo', // memo v1
  'BPFLoaderUpgradeab1e11111111111111111111111',
  'BPFLoader2111111111111111111111111111111111',
  'BPFLoader1111111111111111111111111111111111',
  'LoaderV411111111111111111111111111111111111',
  'NativeLoader1111111111111111111111111111111',
  'Vote111111111111111111111111111111111111111',
  'Stake11111111111111111111111111111111111111',
  'StakeConfig11111111111111111111111111111111',
  'Config1111111111111111111111111111111111111',
  'ComputeBudget111111111111111111111111111111',
  'AddressLookupTab1e1111111111111111111111111',
  'Ed25519SigVerify111111111111111111111111111',
  'KeccakSecp256k11111111111111111111111111111',
  'Secp256r1SigVerify1111111111111111111111111',
  'Feature111111111111111111111111111111111111',
  'ZkE1Gama1Proof11111111111111111111111111111',
  'Sysvar1111111111111111111111111111111111111',
  'SysvarC1ock11111111111111111111111111111111',
  'SysvarRent111111111111111111111111111111111',
  'SysvarEpochSchedu1e111111111111111111111111',
  'SysvarFees111111111111111111111111111111111',
  'SysvarRecentB1ockHashes11111111111111111111',
  'SysvarRewards111111111111111111111111111111',
  'SysvarS1otHashes111111111111111111111111111',
  'SysvarS1otHistory11111111111111111111111111',
  'SysvarStakeHistory1111111111111111111111111',
  'Sysvar1nstructions1111111111111111111111111',
  'SysvarEpochRewards1111111111111111111111111',
  'SysvarLastRestartS1ot1111111111111111111111',
];

/** Owners of accounts that are programs' own: the loaders (program data) and the sysvars. */
const PROGRAM_OWNERS: ReadonlySet<string> = new Set([
  'BPFLoaderUpgradeab1e11111111111111111111111',
  'BPFLoader2111111111111111111111111111111111',
  'BPFLoader1111111111111111111111111111111111',
  'LoaderV411111111111111111111111111111111111',
  'NativeLoader1111111111111111111111111111111',
  'Sysvar1111111111111111111111111111111111111',
]);

const PROGRAMS: ReadonlySet<string> = new Set(WELL_KNOWN_PROGRAMS);
const BURNS: ReadonlySet<string> = new Set(BURN_ADDRESSES);

/**
 * What is wrong with `address` as a destination by what it is, without asking the chain: the system program, a
 * well-known program, a burn address, or one of `platform` (the addresses the platform controls); null otherwise.
 */
export function knownDestinationProblem(address: string, platform: ReadonlySet<string>): DestinationProblem | null {
  if (address === SYSTEM_PROGRAM) return 'system_address';
  if (platform.has(address)) return 'platform_address';
  if (BURNS.has(address)) return 'burn_address';
  if (PROGRAMS.has(address)) return 'program';
  return null;
}

/** What is wrong with a destination by the account the chain holds at it (null: none, or an ordinary wallet). */
export function accountDestinationProblem(info: AccountInfo<Buffer> | null): DestinationProblem | null {
  if (!info) return null;
  const owner = info.owner.toBase58();
  if (info.executable || PROGRAM_OWNERS.has(owner)) return 'program';
  if (isTokenProgram(info.owner)) return 'token_account';
  return null;
}

const isTokenProgram = (key: PublicKey) => key.equals(TOKEN_PROGRAM_ID) || key.equals(TOKEN_2022_PROGRAM_ID);
