/** Shared helpers for the localnet tests: a web3.js connection, raw RPC calls, funded keypairs, a fresh mint. */
import { createMint } from '@solana/spl-token';
import { Connection, Keypair, LAMPORTS_PER_SOL, type PublicKey } from '@solana/web3.js';

export function rpcUrl(): string {
  const url = process.env.TEST_SOLANA_RPC_URL;
  if (!url) throw new Error('TEST_SOLANA_RPC_URL is not set: run the tests with `pnpm test` (scripts/test.sh)');
  return url;
}

export function connect(url = rpcUrl()): Connection {
  return new Connection(url, 'confirmed');
}

/** A raw JSON-RPC call; returns the whole reply (result or error). */
export async function rawRpc(
  method: string,
  params: unknown[] = [],
  url = rpcUrl(),
): Promise<{ result?: unknown; error?: { code: number; message: string; data?: unknown } }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
  });
  return (await res.json()) as { result?: unknown; error?: { code: number; message: string } };
}

/** A new keypair holding `sol` SOL. */
export async function fundedKeypair(conn: Connection, sol = 10): Promise<Keypair> {
  const kp = Keypair.generate();
  const sig = await conn.requestAirdrop(kp.publicKey, sol * LAMPORTS_PER_SOL);
  await conn.confirmTransaction({ signature: sig, ...(await conn.getLatestBlockhash()) }, 'confirmed');
  return kp;
}

/** A fresh 6-decimal mint whose authority is `authority`. */
export async function freshMint(conn: Connection, authority: Keypair, decimals = 6): Promise<PublicKey> {
  return createMint(conn, authority, authority.publicKey, null, decimals);
}
