/**
 * `pnpm wallet`: a user's platform wallet from the command line, with a Solana keypair file (as `solana-keygen new`
 * writes it). Deposits build the SPL transferChecked to the platform's treasury, send it, wait until final and have
 * billing credit it (`@gpu/client/solana`).
 *
 *   pnpm wallet open    --keypair ~/.config/solana/id.json            # a wallet for the keypair's address (proven)
 *   pnpm wallet deposit --keypair ~/.config/solana/id.json --amount 100
 *   pnpm wallet balance --keypair ~/.config/solana/id.json            # or --wallet ID
 *   pnpm wallet claim   --signature SIG [--amount 100] --wallet ID    # credit a transfer already sent
 *   pnpm wallet new     --keypair me.json                             # a new keypair (a new address), mode 0600
 *   pnpm wallet fund    --keypair me.json --amount 1000               # tokens and SOL on the local chain, any address
 *
 * A deposit whose transfer was sent but not credited (billing unreachable, say) prints its signature and the
 * `pnpm wallet claim` line that credits it later; claiming is idempotent (`deposit:<signature>`).
 *
 * Who you are: `--email`/`--password` (or GPU_EMAIL/GPU_PASSWORD; logs in at auth), or a bearer token in GPU_TOKEN.
 * Where: the platform's one origin, its gateway, for every call to auth and billing (`--url` or GATEWAY_URL: as
 * `pnpm demo`, default `pnpm start`'s at PLATFORM_PORT_BASE+10; docker-compose's is the same, 127.0.0.1:8080), and
 * the chain's JSON-RPC for the transfer (`--rpc` or SOLANA_RPC_URL, default `pnpm start`'s at PLATFORM_PORT_BASE+5;
 * docker-compose publishes its validator's there too). The wallet is the caller's user wallet of the keypair's
 * address, opened (and its address proven) on first use; `--wallet ID` names one instead.
 *
 * An address belongs to one user (billing answers ADDRESS_PROVEN_ELSEWHERE to a second one), so each user needs an
 * address of their own: `new` makes a keypair, and `fund` mints platform tokens to any address on the local chain of
 * that `pnpm start` and gives it SOL for fees (scripts/lib/faucet.ts; the mint authority's keypair is in its data
 * folder, PLATFORM_DATA_DIR). `--test-wallet NAME` takes the keypair of one of the local chain's three funded test
 * wallets (`wallet-1` ...) from that data folder instead.
 *
 * A user's mistake (a bad flag, a wrong password, a service that does not answer, a keypair file that is not there)
 * is one line on standard error and exit status 1 (2 for a bad command line); WALLET_DEBUG=1 adds the stack trace.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { billingClient, staticToken, type TokenSource, unwrap, userLogin } from '@gpu/client';
import { claimDeposit, DepositClaimError, deposit, proveAddress, readKeypair } from '@gpu/client/solana';
import { Connection, Keypair, PublicKey } from '@solana/web3.js';
import { FaucetError, fund, localMint } from './lib/faucet.ts';
import { platformDataDir, platformHost, platformPorts, SettingError } from './lib/platform.ts';
import { answerHelp } from './lib/usage.ts';

const USAGE = `usage: pnpm wallet <open|deposit|balance|claim> [--keypair FILE | --test-wallet NAME] [--amount TOKENS]
                 [--wallet ID] [--signature SIG] [--email E --password P | GPU_TOKEN=...] [--url URL] [--rpc URL]
       pnpm wallet new --keypair FILE
       pnpm wallet fund (--keypair FILE | --address ADDRESS) [--amount TOKENS] [--rpc URL]

  open     a wallet for the keypair's address, its address proven
  deposit  send --amount tokens from the keypair to the treasury, credited to the wallet
  balance  the wallet's balance
  claim    credit a transfer already sent (--signature), once
  new      write a new keypair (a new address) to FILE, which must not exist (mode 0600)
  fund     mint --amount tokens (default 1000) to an address on the local chain of pnpm start, with SOL for fees

  --url URL   the platform's gateway, for every call to auth and billing (GATEWAY_URL; default pnpm start's,
              PLATFORM_PORT_BASE+10 = 127.0.0.1:8080, docker-compose's too)
  --rpc URL   the chain's JSON-RPC (SOLANA_RPC_URL; default pnpm start's, PLATFORM_PORT_BASE+5 = 127.0.0.1:8899)

An address belongs to one user: give each user one of their own (new, then fund). --test-wallet wallet-1 (to
wallet-3) takes a funded test wallet of the local chain; it and fund read pnpm start's data folder (PLATFORM_DATA_DIR).`;

answerHelp(USAGE);

/** A mistake on the command line: one line, exit status 2. */
function usageError(message: string): never {
  process.stderr.write(`pnpm wallet: ${message} (pnpm wallet --help shows how)\n`);
  process.exit(2);
}

/** One line for an error a user can act on: the message and, for a network failure, what lay under it. */
function oneLine(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const cause = err.cause instanceof Error ? err.cause : undefined;
  if (err.message === 'fetch failed' && cause) {
    return `a service did not answer (${cause.message}): is the platform running (pnpm start) where PLATFORM_PORT_BASE, PLATFORM_HOST or the flags say?`;
  }
  return err.message.split('\n')[0] as string;
}

let parsed: ReturnType<typeof parseCommandLine>;
function parseCommandLine() {
  const ports = platformPorts();
  const host = platformHost();
  return parseArgs({
    allowPositionals: true,
    options: {
      keypair: { type: 'string' },
      'test-wallet': { type: 'string' },
      amount: { type: 'string' },
      wallet: { type: 'string' },
      signature: { type: 'string' },
      address: { type: 'string' },
      email: { type: 'string', default: process.env.GPU_EMAIL },
      password: { type: 'string', default: process.env.GPU_PASSWORD },
      url: { type: 'string', default: process.env.GATEWAY_URL || host.url(ports.gateway) },
      rpc: { type: 'string', default: process.env.SOLANA_RPC_URL ?? host.url(ports.solana) },
    },
  });
}
try {
  parsed = parseCommandLine();
} catch (err) {
  if (err instanceof SettingError) fail(err.message);
  usageError((err as Error).message);
}
const { positionals, values } = parsed;

/** Fails with one line, exit status 1. */
function fail(message: string): never {
  process.stderr.write(`pnpm wallet: ${message}\n`);
  process.exit(1);
}

const command = positionals[0];
if (!command) usageError('which command? open, deposit, balance, claim, new or fund');
if (!['open', 'deposit', 'balance', 'claim', 'new', 'fund'].includes(command)) usageError(`no command ${command}`);
if (positionals.length > 1) usageError(`unexpected ${positionals.slice(1).join(' ')}`);
if (values.keypair && values['test-wallet']) usageError('--keypair or --test-wallet, not both');

/** The keypair file: --keypair, or the file of the local chain's test wallet --test-wallet names. */
function keypairFile(): string | undefined {
  const name = values['test-wallet'];
  if (!name) return values.keypair;
  const list = path.join(platformDataDir(), 'solana', 'wallets.json');
  let wallets: { name: string; keypair_file: string }[];
  try {
    wallets = JSON.parse(readFileSync(list, 'utf8'));
  } catch (err) {
    fail(`no test wallets in ${list} (${(err as Error).message}): is PLATFORM_DATA_DIR the folder of pnpm start?`);
  }
  const wallet = wallets.find((w) => w.name === name);
  if (!wallet) fail(`no test wallet ${name} in ${list}: there are ${wallets.map((w) => w.name).join(', ')}`);
  return wallet.keypair_file;
}

/** The keypair, or one line saying why it cannot be read. */
function keypairOf(file: string): ReturnType<typeof readKeypair> {
  try {
    return readKeypair(file);
  } catch (err) {
    fail(`cannot read the keypair ${file}: ${(err as Error).message}`);
  }
}

const print = (value: unknown) => process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);

/** `new`: a keypair never seen before, in the Solana CLI's format, written to a file that did not exist (0600). */
function newKeypair(file: string | undefined): never {
  if (!file) usageError('new needs --keypair FILE (where to write the new keypair)');
  const keypair = Keypair.generate();
  try {
    writeFileSync(file, JSON.stringify([...keypair.secretKey]), { mode: 0o600, flag: 'wx' });
  } catch (err) {
    const exists = (err as NodeJS.ErrnoException).code === 'EEXIST';
    fail(`cannot write ${file}: ${exists ? 'it exists (a new keypair never replaces one)' : oneLine(err)}`);
  }
  print({ address: keypair.publicKey.toBase58(), keypair_file: path.resolve(file) });
  process.exit(0);
}

/** `fund`: tokens and SOL for an address (--address, or the keypair's) on the local chain of `pnpm start`. */
async function fundAddress(): Promise<never> {
  const file = keypairFile();
  if (Boolean(values.address) === Boolean(file)) usageError('fund needs --keypair FILE or --address ADDRESS (one)');
  let to: PublicKey;
  try {
    to = new PublicKey(values.address ?? keypairOf(file as string).publicKey.toBase58());
  } catch {
    fail(`not a Solana address: ${values.address}`);
  }
  let mint: ReturnType<typeof localMint>;
  try {
    mint = localMint(platformDataDir());
  } catch (err) {
    fail(`${oneLine(err)}: is PLATFORM_DATA_DIR the data folder of pnpm start?`);
  }
  try {
    print(await fund(new Connection(values.rpc, 'confirmed'), mint, to, values.amount ?? '1000'));
  } catch (err) {
    if (err instanceof FaucetError) fail(err.message);
    if (process.env.WALLET_DEBUG) process.stderr.write(`${(err as Error).stack}\n`);
    fail(`the local chain at ${values.rpc} did not fund ${to.toBase58()}: ${oneLine(err)}`);
  }
  process.exit(0);
}

if (command === 'new') newKeypair(values.keypair);
if (command === 'fund') await fundAddress();

let token: TokenSource;
if (values.email && values.password) {
  token = userLogin({ authUrl: values.url, email: values.email, password: values.password });
} else if (process.env.GPU_TOKEN) {
  token = staticToken(process.env.GPU_TOKEN);
} else {
  usageError('who are you? pass --email and --password (or GPU_EMAIL, GPU_PASSWORD), or set GPU_TOKEN');
}
const billing = billingClient({ baseUrl: values.url, token });

/** The caller's user ID, from the token's subject. */
async function userId(): Promise<string> {
  const [, payload] = (await token.get()).split('.');
  return JSON.parse(Buffer.from(payload ?? '', 'base64url').toString('utf8')).sub;
}

/**
 * The wallet to act on: `--wallet`, else the caller's user wallet of the keypair's address (opened now when they
 * have none; the 409 of one that exists names it).
 */
async function walletId(keypair?: ReturnType<typeof readKeypair>): Promise<string> {
  if (values.wallet) return values.wallet;
  if (!keypair) fail('pass --wallet ID (printed by `pnpm wallet open`) or --keypair FILE');
  const opened = await billing.POST('/api/v1/wallet', {
    body: { owner_type: 'user', owner_id: await userId(), solana_address: keypair.publicKey.toBase58() },
  });
  const existing = (opened.error as { code?: string; wallet_id?: string } | undefined) ?? {};
  if (existing.code === 'WALLET_ALREADY_EXISTS' && existing.wallet_id) return existing.wallet_id;
  return unwrap(opened).id;
}

const file = keypairFile();
try {
  if (command === 'open') {
    if (!file) usageError('open needs --keypair FILE (or --test-wallet NAME)');
    const keypair = keypairOf(file);
    const id = await walletId(keypair);
    await proveAddress(billing, id, keypair);
    print(unwrap(await billing.GET('/api/v1/wallet/{walletID}', { params: { path: { walletID: id } } })));
  } else if (command === 'deposit') {
    if (!file || !values.amount) usageError('deposit needs --keypair FILE (or --test-wallet NAME) and --amount TOKENS');
    const keypair = keypairOf(file);
    const id = await walletId(keypair);
    await proveAddress(billing, id, keypair);
    print(await deposit({ billing, rpcUrl: values.rpc, keypair, walletId: id, amount: values.amount }));
  } else if (command === 'claim') {
    if (!values.signature) usageError('claim needs --signature SIG (and --wallet ID or --keypair FILE)');
    const id = await walletId(file ? keypairOf(file) : undefined);
    print(await claimDeposit({ billing, walletId: id, signature: values.signature, amount: values.amount }));
  } else {
    const id = await walletId(file ? keypairOf(file) : undefined);
    print(unwrap(await billing.GET('/api/v1/wallet/{walletID}/balance', { params: { path: { walletID: id } } })));
  }
} catch (err) {
  if (err instanceof DepositClaimError) {
    process.stderr.write(
      `${err.message}\nsignature: ${err.signature}\nclaim it with: ${err.claimCommand} --url ${values.url}\n`,
    );
    process.exit(1);
  }
  if (process.env.WALLET_DEBUG) process.stderr.write(`${(err as Error).stack}\n`);
  fail(oneLine(err));
}
