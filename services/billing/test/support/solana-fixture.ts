/**
 * A platform token world on the test localnet (TEST_SOLANA_RPC_URL), fresh per
 * test file: its own mint (6 decimals), a treasury wallet with its keypair
 * file and token account, and helpers to fund user wallets and send deposits.
 * Everything goes through ordinary RPC calls with web3.js + spl-token.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { testEnv } from '@gpu/common/testing';
import {
  createAssociatedTokenAccountIdempotentInstruction,
  createMint,
  createTransferCheckedInstruction,
  getAssociatedTokenAddressSync,
  getOrCreateAssociatedTokenAccount,
  mintTo,
} from '@solana/spl-token';
import {
  Connection,
  Keypair,
  LAMPORTS_PER_SOL,
  type PublicKey,
  sendAndConfirmTransaction,
  Transaction,
  type TransactionInstruction,
} from '@solana/web3.js';
import type { SolanaChainOptions } from '../../src/adapters/solana-chain.ts';

export const DECIMALS = 6;
const UNIT = 10n ** BigInt(DECIMALS);

/** Raw JSON-RPC call to the localnet (for its `localnet_*` test controls). */
export async function localnetRpc(
  method: string,
  params: unknown[] = [],
  url = testEnv.solanaRpcUrl,
): Promise<unknown> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
  });
  const body = (await res.json()) as { result?: unknown; error?: { message: string } };
  if (body.error) throw new Error(`${method}: ${body.error.message}`);
  return body.result;
}

export interface SolanaFixture {
  connection: Connection;
  mint: PublicKey;
  treasury: Keypair;
  treasuryKeypairFile: string;
  /** options for SolanaChain.connect */
  chainOptions(extra?: Partial<SolanaChainOptions>): SolanaChainOptions;
  /** a new wallet with SOL for fees and `tokens` whole tokens of the platform mint (or of `mint`) */
  wallet(tokens?: bigint, mint?: PublicKey): Promise<Keypair>;
  /** a transferChecked of `tokens` base units from `from` to `toOwner`'s ATA (created when missing); returns the signature */
  transfer(
    from: Keypair,
    toOwner: PublicKey,
    units: bigint,
    opts?: { mint?: PublicKey; skipPreflight?: boolean; extra?: TransactionInstruction[]; signers?: Keypair[] },
  ): Promise<string>;
  /** another mint with the same authority, for wrong-mint cases */
  otherMint(): Promise<PublicKey>;
}

async function airdrop(conn: Connection, to: PublicKey, sol: number): Promise<void> {
  const sig = await conn.requestAirdrop(to, sol * LAMPORTS_PER_SOL);
  await conn.confirmTransaction({ signature: sig, ...(await conn.getLatestBlockhash()) }, 'confirmed');
}

/** Creates the fixture on `rpcUrl` (default: the test localnet): mint, treasury (mint authority) with 1,000,000 tokens. */
export async function createSolanaFixture(rpcUrl = testEnv.solanaRpcUrl): Promise<SolanaFixture> {
  // the localnet serves PubSub on its RPC port too (and on port + 1, where web3.js would look)
  const connection = new Connection(rpcUrl, { commitment: 'confirmed', wsEndpoint: rpcUrl.replace(/^http/, 'ws') });
  const treasury = Keypair.generate();
  await airdrop(connection, treasury.publicKey, 100);
  const mint = await createMint(connection, treasury, treasury.publicKey, null, DECIMALS);
  const treasuryAta = await getOrCreateAssociatedTokenAccount(connection, treasury, mint, treasury.publicKey);
  await mintTo(connection, treasury, mint, treasuryAta.address, treasury, 1_000_000n * UNIT);
  const dir = mkdtempSync(join(tmpdir(), 'billing-solana-'));
  const treasuryKeypairFile = join(dir, 'treasury-keypair.json');
  writeFileSync(treasuryKeypairFile, JSON.stringify(Array.from(treasury.secretKey)), { mode: 0o600 });

  const transfer: SolanaFixture['transfer'] = async (from, toOwner, units, opts = {}) => {
    const m = opts.mint ?? mint;
    const source = getAssociatedTokenAddressSync(m, from.publicKey, true);
    const dest = getAssociatedTokenAddressSync(m, toOwner, true);
    const tx = new Transaction().add(
      createAssociatedTokenAccountIdempotentInstruction(from.publicKey, dest, toOwner, m),
      createTransferCheckedInstruction(source, m, dest, from.publicKey, units, DECIMALS),
      ...(opts.extra ?? []),
    );
    if (opts.skipPreflight) {
      const latest = await connection.getLatestBlockhash();
      tx.recentBlockhash = latest.blockhash;
      tx.feePayer = from.publicKey;
      tx.sign(from, ...(opts.signers ?? []));
      const sig = await connection.sendRawTransaction(tx.serialize(), { skipPreflight: true });
      await connection.confirmTransaction({ signature: sig, ...latest }, 'confirmed');
      return sig;
    }
    return sendAndConfirmTransaction(connection, tx, [from, ...(opts.signers ?? [])], { commitment: 'confirmed' });
  };

  return {
    connection,
    mint,
    treasury,
    treasuryKeypairFile,
    chainOptions: (extra = {}) => ({
      rpcUrl,
      mint: mint.toBase58(),
      treasuryKeypairFile,
      commitment: 'finalized',
      pollIntervalMs: 100,
      resendIntervalMs: 500,
      ...extra,
    }),
    wallet: async (tokens = 0n, m = mint) => {
      const kp = Keypair.generate();
      await airdrop(connection, kp.publicKey, 1);
      if (tokens > 0n) {
        const ata = await getOrCreateAssociatedTokenAccount(connection, treasury, m, kp.publicKey);
        await mintTo(connection, treasury, m, ata.address, treasury, tokens * UNIT);
      }
      return kp;
    },
    transfer,
    otherMint: () => createMint(connection, treasury, treasury.publicKey, null, DECIMALS),
  };
}

/** A private localnet process (for tests that move its clock, like blockhash expiry); `stop` ends it. */
export async function startPrivateLocalnet(): Promise<{ rpcUrl: string; stop(): Promise<void> }> {
  const { spawn } = await import('node:child_process');
  const { createServer } = await import('node:net');
  const { fileURLToPath } = await import('node:url');
  const port = await new Promise<number>((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => resolve(p));
    });
  });
  const script = fileURLToPath(new URL('../../../../tools/solana-localnet/src/server.ts', import.meta.url));
  const child = spawn(process.execPath, ['--import', 'tsx', script, '--port', String(port), '--ws-port', '0'], {
    stdio: 'ignore',
  });
  const rpcUrl = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      if ((await fetch(`${rpcUrl}/health`)).ok) break;
    } catch {}
    if (Date.now() > deadline) {
      child.kill();
      throw new Error('the private localnet did not start');
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    rpcUrl,
    stop: () =>
      new Promise<void>((resolve) => {
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}
