/**
 * The local chain's faucet: platform tokens, and SOL for fees, for any address on the chain `pnpm start` runs. The
 * tokens are minted by the platform mint's authority (the treasury), whose keypair the chain's set-up left in the data
 * folder (`<data>/solana/mint.json`, `treasury_keypair_file`), into the address's associated token account (made when
 * missing); the SOL is an airdrop. Nothing moves out of the treasury's token account, which holds the deposits. For a
 * development chain only: on a real cluster nobody but the platform holds the mint authority.
 *
 *   const mint = localMint(dataDir);                    // throws FaucetError when the data folder has no chain
 *   await fund(connection, mint, address, '1000');      // `pnpm wallet fund`, and each renter of `pnpm demo`
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { getOrCreateAssociatedTokenAccount, mintTo } from '@solana/spl-token';
import { type Connection, Keypair, LAMPORTS_PER_SOL, PublicKey } from '@solana/web3.js';
import { Decimal } from 'decimal.js';

/** The local chain's platform token, as its set-up wrote it (`<data>/solana/mint.json`). */
export interface LocalMint {
  mint: string;
  decimals: number;
  /** The mint authority's keypair file (the treasury's), an absolute path. */
  treasury_keypair_file: string;
}

/** The data folder has no local chain, or an amount is not one the token can hold: one line for the user. */
export class FaucetError extends Error {
  override name = 'FaucetError';
}

/** The platform token of the local chain whose set-up wrote `<dataDir>/solana/mint.json`. */
export function localMint(dataDir: string): LocalMint {
  const file = path.join(dataDir, 'solana', 'mint.json');
  let mint: LocalMint;
  try {
    mint = JSON.parse(readFileSync(file, 'utf8')) as LocalMint;
  } catch (err) {
    throw new FaucetError(`no local chain in ${file} (${(err as Error).message.split('\n')[0]})`);
  }
  return { ...mint, treasury_keypair_file: path.resolve(path.dirname(file), mint.treasury_keypair_file) };
}

/** What `fund` gave an address. */
export interface Funded {
  address: string;
  token_account: string;
  /** Tokens minted to it, the token's form ("1000.000000"). */
  tokens: string;
  /** The mint's signature. */
  signature: string;
}

/** The SOL an address gets when it holds less: enough for thousands of transfers and a few token accounts. */
const SOL_FOR_FEES = 1;

/** Mints `tokens` (a decimal string or a number of whole tokens) to `to`, and gives it SOL for fees if it has little. */
export async function fund(
  connection: Connection,
  mint: LocalMint,
  to: PublicKey,
  tokens: string | number,
): Promise<Funded> {
  let amount: Decimal;
  try {
    amount = new Decimal(tokens);
  } catch {
    throw new FaucetError(`not an amount of tokens: ${tokens}`);
  }
  const units = amount.mul(new Decimal(10).pow(mint.decimals));
  if (!units.isInteger() || units.lte(0)) {
    throw new FaucetError(`not an amount of tokens: ${tokens} (more than 0, at most ${mint.decimals} decimals)`);
  }
  if ((await connection.getBalance(to, 'confirmed')) < (SOL_FOR_FEES / 2) * LAMPORTS_PER_SOL) {
    const airdrop = await connection.requestAirdrop(to, SOL_FOR_FEES * LAMPORTS_PER_SOL);
    await connection.confirmTransaction(
      { signature: airdrop, ...(await connection.getLatestBlockhash()) },
      'finalized',
    );
  }
  const authority = Keypair.fromSecretKey(
    Uint8Array.from(JSON.parse(readFileSync(mint.treasury_keypair_file, 'utf8'))),
  );
  const mintKey = new PublicKey(mint.mint);
  const account = await getOrCreateAssociatedTokenAccount(connection, authority, mintKey, to);
  const signature = await mintTo(
    connection,
    authority,
    mintKey,
    account.address,
    authority,
    BigInt(units.toFixed(0)),
    [],
    {
      commitment: 'finalized',
    },
  );
  return {
    address: to.toBase58(),
    token_account: account.address.toBase58(),
    tokens: amount.toFixed(mint.decimals),
    signature,
  };
}
