/**
 * Creates what the platform needs on a development chain, through ordinary
 * RPC calls (so it works against this localnet and a real solana-test-validator
 * alike): the platform mint, the treasury wallet (mint authority, fee payer)
 * with its token account and an initial supply, and funded test wallets.
 * Idempotent: keypairs already in the folder are reused and only what is
 * missing on chain is created. Keys come from fixed seeds by default, so the
 * addresses are the same on every machine (development keys: never use them
 * on a real cluster); `--random-keys` makes fresh ones.
 *
 * Usage: tsx tools/solana-localnet/src/setup.ts [--rpc http://127.0.0.1:8899] [--dir .data/solana]
 *          [--wallets 3] [--decimals 6] [--random-keys]
 */
import { createHash } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { createMint, getMint, getOrCreateAssociatedTokenAccount, mintTo } from '@solana/spl-token';
import { Connection, Keypair, LAMPORTS_PER_SOL, type PublicKey } from '@solana/web3.js';

export interface SetupOptions {
  rpcUrl: string;
  /** WebSocket URL; web3.js derives it from rpcUrl (port + 1) when absent */
  wsUrl?: string;
  dir: string;
  wallets?: number;
  decimals?: number;
  randomKeys?: boolean;
  /** initial treasury supply, whole tokens */
  treasurySupply?: bigint;
  /** tokens each test wallet receives */
  walletTokens?: bigint;
}

export interface SetupResult {
  mint: string;
  decimals: number;
  treasury: string;
  treasuryTokenAccount: string;
  treasuryKeypairFile: string;
  wallets: { name: string; address: string; tokenAccount: string; keypairFile: string }[];
}

/** Writes a keypair in the Solana CLI format (a JSON array of the 64 secret-key bytes), readable only by the owner. */
export function writeKeypair(file: string, kp: Keypair): void {
  writeFileSync(file, JSON.stringify(Array.from(kp.secretKey)), { mode: 0o600 });
  chmodSync(file, 0o600);
}

/** Reads a keypair in the Solana CLI format. */
export function readKeypair(file: string): Keypair {
  return Keypair.fromSecretKey(Uint8Array.from(JSON.parse(readFileSync(file, 'utf8')) as number[]));
}

/** The development keypair named `name`: fixed (from a public seed) unless `random`. */
export function devKeypair(name: string, random = false): Keypair {
  if (random) return Keypair.generate();
  return Keypair.fromSeed(createHash('sha256').update(`gpu-platform-localnet:${name}`).digest());
}

function keypairIn(dir: string, file: string, name: string, random: boolean): { kp: Keypair; file: string } {
  const path = join(dir, file);
  if (existsSync(path)) return { kp: readKeypair(path), file: path };
  const kp = devKeypair(name, random);
  writeKeypair(path, kp);
  return { kp, file: path };
}

async function fundSol(conn: Connection, who: PublicKey, minSol: number, topUpSol: number): Promise<void> {
  if ((await conn.getBalance(who)) >= minSol * LAMPORTS_PER_SOL) return;
  const sig = await conn.requestAirdrop(who, topUpSol * LAMPORTS_PER_SOL);
  const latest = await conn.getLatestBlockhash();
  await conn.confirmTransaction({ signature: sig, ...latest }, 'confirmed');
}

/** Runs the setup; see the file comment. */
export async function runSetup(opts: SetupOptions): Promise<SetupResult> {
  const dir = resolve(opts.dir);
  mkdirSync(join(dir, 'wallets'), { recursive: true });
  const random = opts.randomKeys ?? false;
  const conn = new Connection(opts.rpcUrl, { commitment: 'confirmed', wsEndpoint: opts.wsUrl });
  const treasury = keypairIn(dir, 'treasury-keypair.json', 'treasury', random);
  const mintKp = keypairIn(dir, 'mint-keypair.json', 'mint', random);
  await fundSol(conn, treasury.kp.publicKey, 10, 100);

  let decimals = opts.decimals ?? 6;
  if (await conn.getAccountInfo(mintKp.kp.publicKey)) {
    decimals = (await getMint(conn, mintKp.kp.publicKey)).decimals;
  } else {
    await createMint(conn, treasury.kp, treasury.kp.publicKey, null, decimals, mintKp.kp);
  }
  const unit = 10n ** BigInt(decimals);
  const mint = mintKp.kp.publicKey;
  const treasuryAta = await getOrCreateAssociatedTokenAccount(conn, treasury.kp, mint, treasury.kp.publicKey);
  if (treasuryAta.amount === 0n) {
    await mintTo(conn, treasury.kp, mint, treasuryAta.address, treasury.kp, (opts.treasurySupply ?? 1_000_000n) * unit);
  }

  const wallets: SetupResult['wallets'] = [];
  for (let i = 1; i <= (opts.wallets ?? 3); i++) {
    const name = `wallet-${i}`;
    const w = keypairIn(dir, join('wallets', `${name}.json`), name, random);
    await fundSol(conn, w.kp.publicKey, 1, 10);
    const ata = await getOrCreateAssociatedTokenAccount(conn, treasury.kp, mint, w.kp.publicKey);
    if (ata.amount === 0n) {
      await mintTo(conn, treasury.kp, mint, ata.address, treasury.kp, (opts.walletTokens ?? 10_000n) * unit);
    }
    wallets.push({
      name,
      address: w.kp.publicKey.toBase58(),
      tokenAccount: ata.address.toBase58(),
      keypairFile: w.file,
    });
  }

  const result: SetupResult = {
    mint: mint.toBase58(),
    decimals,
    treasury: treasury.kp.publicKey.toBase58(),
    treasuryTokenAccount: treasuryAta.address.toBase58(),
    treasuryKeypairFile: treasury.file,
    wallets,
  };
  writeFileSync(
    join(dir, 'mint.json'),
    `${JSON.stringify(
      {
        mint: result.mint,
        decimals,
        treasury: result.treasury,
        treasury_token_account: result.treasuryTokenAccount,
        treasury_keypair_file: result.treasuryKeypairFile,
        rpc_url: opts.rpcUrl,
      },
      null,
      2,
    )}\n`,
  );
  writeFileSync(
    join(dir, 'wallets.json'),
    `${JSON.stringify(
      wallets.map((w) => ({
        name: w.name,
        address: w.address,
        token_account: w.tokenAccount,
        keypair_file: w.keypairFile,
      })),
      null,
      2,
    )}\n`,
  );
  return result;
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  const { values } = parseArgs({
    options: {
      rpc: { type: 'string', default: 'http://127.0.0.1:8899' },
      ws: { type: 'string' },
      dir: { type: 'string', default: '.data/solana' },
      wallets: { type: 'string', default: '3' },
      decimals: { type: 'string', default: '6' },
      'random-keys': { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    process.stdout.write(
      'usage: tsx tools/solana-localnet/src/setup.ts [--rpc http://127.0.0.1:8899] [--ws URL] [--dir .data/solana]\n' +
        '         [--wallets 3] [--decimals 6] [--random-keys]\n\n' +
        'Creates the platform mint, the treasury and funded test wallets on a development chain (keypairs and\n' +
        'addresses in --dir). Idempotent. See tools/solana-localnet/README.md.\n',
    );
    process.exit(0);
  }
  const r = await runSetup({
    rpcUrl: values.rpc,
    wsUrl: values.ws,
    dir: values.dir,
    wallets: Number(values.wallets),
    decimals: Number(values.decimals),
    randomKeys: values['random-keys'],
  });
  process.stdout.write(`${JSON.stringify(r, null, 2)}\n`);
  process.exit(0);
}
