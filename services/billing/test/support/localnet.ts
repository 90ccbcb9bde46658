/**
 * A fresh platform mint and treasury on the real local chain the test
 * environment runs (tools/solana-localnet, TEST_SOLANA_RPC_URL), funded
 * users, token transfers, and the localnet's test controls.
 */
import { testEnv } from '@gpu/common/testing';
import {
  createMint,
  createTransferCheckedInstruction,
  getAssociatedTokenAddressSync,
  getOrCreateAssociatedTokenAccount,
  mintTo,
} from '@solana/spl-token';
import { Connection, Keypair, LAMPORTS_PER_SOL, type PublicKey, Transaction } from '@solana/web3.js';
import { SolanaChain } from '../../src/adapters/solana-chain.ts';

export const rpcUrl = () => testEnv.solanaRpcUrl;

/** Calls one of the localnet's `localnet_*` control methods. */
export async function localnetRpc(method: string, params: unknown[] = [], url = rpcUrl()): Promise<unknown> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
  });
  const body = (await res.json()) as { result?: unknown; error?: { message: string } };
  if (body.error) throw new Error(`${method}: ${body.error.message}`);
  return body.result;
}

/** A fresh mint and treasury on the shared test chain, or on the chain at `url` (a private one). */
export async function setupLocalnet(decimals = 6, url = rpcUrl()) {
  // The localnet serves PubSub on its RPC port too (a private one only there).
  const wsUrl = url.replace(/^http/, 'ws');
  const conn = new Connection(url, { commitment: 'confirmed', wsEndpoint: wsUrl });
  const airdrop = async (who: PublicKey, sol = 10) => {
    const sig = await conn.requestAirdrop(who, sol * LAMPORTS_PER_SOL);
    await conn.confirmTransaction({ signature: sig, ...(await conn.getLatestBlockhash()) }, 'confirmed');
  };
  const unit = 10n ** BigInt(decimals);
  const treasury = Keypair.generate();
  await airdrop(treasury.publicKey, 100);
  const mint = await createMint(conn, treasury, treasury.publicKey, null, decimals);
  const treasuryAta = await getOrCreateAssociatedTokenAccount(conn, treasury, mint, treasury.publicKey);
  await mintTo(conn, treasury, mint, treasuryAta.address, treasury, 1_000_000n * unit);
  const chain = await SolanaChain.connect({
    rpcUrl: url,
    wsUrl,
    mint: mint.toBase58(),
    treasuryKeypair: treasury,
    commitment: 'finalized',
    decimals,
    confirmTimeoutMs: 15_000,
    pollIntervalMs: 100,
  });

  /** A user keypair with SOL and `tokens` whole tokens of `tokenMint` (the platform mint by default). */
  async function user(tokens: bigint, tokenMint: PublicKey = mint): Promise<Keypair> {
    const kp = Keypair.generate();
    await airdrop(kp.publicKey, 1);
    const ata = await getOrCreateAssociatedTokenAccount(conn, treasury, tokenMint, kp.publicKey);
    if (tokens > 0n) await mintTo(conn, treasury, tokenMint, ata.address, treasury, tokens * unit);
    return kp;
  }

  /**
   * Sends `units` base units of `tokenMint` from `from` to `toOwner`'s token account; returns the signature.
   * With `skipPreflight`, a transfer that cannot succeed still lands, as a failed transaction.
   */
  async function transfer(
    from: Keypair,
    toOwner: PublicKey,
    units: bigint,
    opts: { tokenMint?: PublicKey; skipPreflight?: boolean; waitFor?: 'finalized' | 'confirmed' } = {},
  ): Promise<string> {
    const m = opts.tokenMint ?? mint;
    const tx = new Transaction({ feePayer: from.publicKey, ...(await conn.getLatestBlockhash()) }).add(
      createTransferCheckedInstruction(
        getAssociatedTokenAddressSync(m, from.publicKey),
        m,
        getAssociatedTokenAddressSync(m, toOwner, true),
        from.publicKey,
        units,
        decimals,
      ),
    );
    tx.sign(from);
    const signature = await conn.sendRawTransaction(tx.serialize(), { skipPreflight: opts.skipPreflight ?? false });
    const wanted = opts.waitFor ?? 'finalized';
    for (let i = 0; i < 150; i++) {
      const s = (await conn.getSignatureStatuses([signature], { searchTransactionHistory: true })).value[0];
      if (
        s?.err ||
        s?.confirmationStatus === 'finalized' ||
        (wanted === 'confirmed' && s?.confirmationStatus === 'confirmed')
      ) {
        return signature;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`transfer ${signature} did not reach ${wanted}`);
  }

  /** A second mint, for wrong-mint deposits. */
  async function otherMint(): Promise<PublicKey> {
    const other = await createMint(conn, treasury, treasury.publicKey, null, decimals);
    await getOrCreateAssociatedTokenAccount(conn, treasury, other, treasury.publicKey);
    return other;
  }

  return { conn, chain, mint, treasury, unit, user, transfer, otherMint, airdrop };
}

export type Localnet = Awaited<ReturnType<typeof setupLocalnet>>;
