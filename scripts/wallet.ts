/**
 * `pnpm wallet`: `gpu wallet` (tools/cli) under the name the checkout's guides used first, its answers as JSON, plus
 * the local chain's two helpers. Each wallet command is translated and run by `gpu` in this process, so there is one
 * tool for wallets:
 *
 *   pnpm wallet open    --keypair FILE                        gpu wallet open --keypair FILE (opened, address proven)
 *   pnpm wallet deposit --keypair FILE --amount 100 [--wallet ID]  gpu wallet deposit [ID] --keypair FILE --amount 100
 *   pnpm wallet balance [--wallet ID | --keypair FILE | --address A]  gpu wallet balance [ID | --address A or the keypair's]
 *   pnpm wallet claim   --signature SIG [--amount 100] [--wallet ID | --keypair FILE]
 *                                                             gpu wallet deposit [ID | --address ...] --signature SIG
 *   pnpm wallet list | use | history | withdraw ...           gpu wallet list | use | history | withdraw ..., as given
 *   pnpm wallet new     --keypair me.json                     a new keypair (a new address), mode 0600
 *   pnpm wallet fund    --keypair me.json --amount 1000       tokens and SOL on the local chain, any address
 *
 * `--test-wallet NAME` stands for `--keypair` with the keypair of one of the local chain's three funded test wallets
 * (`wallet-1` ...) in `pnpm start`'s data folder (PLATFORM_DATA_DIR).
 *
 * Who you are: `gpu`'s (its saved sign-in, GPU_API_KEY); or, for this one command, `--email`/`--password`
 * (GPU_EMAIL/GPU_PASSWORD: signed in for it and signed out after, so no sign-in is left behind) or GPU_TOKEN (an
 * access token, or an API key), with a configuration folder of the command's own (so nothing of it is saved).
 * Where: `--url` or GATEWAY_URL, else where `gpu` looks (its saved URL, PLATFORM_PORT_BASE/PLATFORM_HOST, the file
 * `pnpm start` writes in its data folder, 127.0.0.1:8080); the chain's JSON-RPC for a deposit: `--rpc` or
 * SOLANA_RPC_URL, else `pnpm start`'s the same way.
 *
 * A mistake on the command line is one line on standard error and exit status 2; a failure is one line (`gpu: ...`
 * from gpu) and exit status 1.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { ApiError, authClient, unwrap } from '@gpu/client';
import { readKeypair } from '@gpu/client/solana';
import { Connection, Keypair, PublicKey } from '@solana/web3.js';
import { readConfig } from '../tools/cli/src/config.ts';
import { chainRpcUrl, platformUrl } from '../tools/cli/src/platform-url.ts';
import { main } from '../tools/cli/src/program.ts';
import { FaucetError, fund, localMint } from './lib/faucet.ts';
import { platformDataDir, SettingError } from './lib/platform.ts';
import { answerHelp } from './lib/usage.ts';

const USAGE = `usage: pnpm wallet <command> ...: gpu wallet (pnpm gpu wallet --help), its answers as JSON, and the local chain's helpers

  pnpm wallet open    (--keypair FILE | --test-wallet NAME)                  your wallet at the keypair's address, proven
  pnpm wallet deposit (--keypair FILE | --test-wallet NAME) --amount TOKENS [--wallet ID] [--rpc URL]
  pnpm wallet balance [--wallet ID | --keypair FILE | --address ADDRESS]
  pnpm wallet claim   --signature SIG [--amount TOKENS] [--wallet ID | --keypair FILE | --address ADDRESS]
  pnpm wallet list | use ID | history [ID] | withdraw [ID] --amount TOKENS    as gpu wallet has them
  pnpm wallet new     --keypair FILE                        a new keypair (a new address) in FILE, which must not exist (0600)
  pnpm wallet fund    (--keypair FILE | --address ADDRESS) [--amount TOKENS] [--rpc URL]
                      mint tokens (default 1000) and SOL for fees to an address on pnpm start's local chain

  who     gpu's sign-in (pnpm gpu login), or for this command alone --email E --password P (GPU_EMAIL, GPU_PASSWORD;
          signed out after) or GPU_TOKEN (an access token or an API key)
  --url   the platform's gateway (GATEWAY_URL; default where gpu looks: its saved URL, PLATFORM_PORT_BASE+10 and
          PLATFORM_HOST, pnpm start's data folder, 127.0.0.1:8080)
  --rpc   the chain's JSON-RPC (SOLANA_RPC_URL; default pnpm start's, PLATFORM_PORT_BASE+5 = 127.0.0.1:8899)

An address belongs to one user: give each user one of their own (new, then fund). --test-wallet wallet-1 (to
wallet-3) takes a funded test wallet of the local chain; it and fund read pnpm start's data folder (PLATFORM_DATA_DIR).`;

answerHelp(USAGE);

/** A mistake on the command line: one line, exit status 2. */
function usageError(message: string): never {
  process.stderr.write(`pnpm wallet: ${message} (pnpm wallet --help shows how)\n`);
  process.exit(2);
}

/** Fails with one line, exit status 1. */
function fail(message: string): never {
  process.stderr.write(`pnpm wallet: ${message}\n`);
  process.exit(1);
}

/** What a network failure lay on, or the message. */
const oneLine = (err: unknown) => {
  const cause = (err as { cause?: { message?: string } }).cause;
  return (err as Error).message === 'fetch failed' && cause?.message ? cause.message : (err as Error).message;
};

/** The commands this script translates, with the options each takes (beside who and where); any other goes to gpu. */
const USES: Record<string, string[]> = {
  open: ['keypair', 'test-wallet'],
  deposit: ['keypair', 'test-wallet', 'amount', 'wallet', 'signature', 'address', 'rpc'],
  balance: ['keypair', 'test-wallet', 'wallet', 'address'],
  claim: ['keypair', 'test-wallet', 'amount', 'wallet', 'signature', 'address'],
  new: ['keypair'],
  fund: ['keypair', 'test-wallet', 'address', 'amount', 'rpc'],
};
const TRANSLATED = Object.keys(USES);
const command = process.argv[2];
if (!command) usageError('which command? open, deposit, balance, claim, list, use, history, withdraw, new or fund');

let values: ReturnType<typeof parseCommandLine>['values'];
let positionals: string[];
/** The arguments of a command passed to gpu as it is (without --email and --password, which are this script's). */
let passed: string[] = [];
function parseCommandLine() {
  return parseArgs({
    args: process.argv.slice(3),
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
      url: { type: 'string', default: process.env.GATEWAY_URL },
      rpc: { type: 'string' },
    },
  });
}
if (TRANSLATED.includes(command)) {
  try {
    ({ values, positionals } = parseCommandLine());
  } catch (err) {
    usageError((err as Error).message);
  }
  if (positionals.length > (['deposit', 'balance', 'claim'].includes(command) ? 1 : 0)) {
    usageError(`unexpected ${positionals.join(' ')}`);
  }
  // An option the command does not use is a mistake, never dropped (a deposit --address credited another wallet).
  const unused = Object.keys(values).filter(
    (name) => !['email', 'password', 'url'].includes(name) && values[name as keyof typeof values] !== undefined,
  );
  for (const name of unused) if (!USES[command]!.includes(name)) usageError(`${command} takes no --${name}`);
  if (values.keypair && values['test-wallet']) usageError('--keypair or --test-wallet, not both');
  if (positionals[0] && values.wallet) usageError('a wallet ID or --wallet, not both');
  // balance and claim name one wallet (a deposit's keypair is where the tokens come from, its ID where they go).
  const which = [positionals[0] ?? values.wallet, values.keypair ?? values['test-wallet'], values.address];
  if ((command === 'balance' || command === 'claim') && which.filter(Boolean).length > 1) {
    usageError('one wallet: an ID (or --wallet), --keypair (or --test-wallet), or --address');
  }
  if (command === 'deposit' && positionals[0] !== undefined && values.address) {
    usageError('a wallet ID or --address, not both');
  }
} else {
  // Passed to gpu as given (its own --url among them); who from --email/--password (taken out) or the environment.
  passed = process.argv.slice(2);
  values = {
    email: takeOption(passed, 'email') ?? process.env.GPU_EMAIL,
    password: takeOption(passed, 'password') ?? process.env.GPU_PASSWORD,
    url: process.env.GATEWAY_URL,
  };
  positionals = [];
}

/** Takes `--name VALUE` (or `--name=VALUE`) out of `args`: its value, or undefined. */
function takeOption(args: string[], name: string): string | undefined {
  const at = args.findIndex((a) => a === `--${name}` || a.startsWith(`--${name}=`));
  if (at < 0) return undefined;
  const [flag] = args.splice(at, 1);
  if (flag!.includes('=')) return flag!.slice(name.length + 3);
  if (at >= args.length) usageError(`--${name} needs a value`);
  return args.splice(at, 1)[0];
}

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

/** The keypair's address, or one line saying why it cannot be read. */
function addressOf(file: string): string {
  try {
    return readKeypair(file).publicKey.toBase58();
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
    to = new PublicKey(values.address ?? addressOf(file as string));
  } catch {
    fail(`not a Solana address: ${values.address}`);
  }
  let mint: ReturnType<typeof localMint>;
  try {
    mint = localMint(platformDataDir());
  } catch (err) {
    fail(`${oneLine(err)}: is PLATFORM_DATA_DIR the data folder of pnpm start?`);
  }
  const rpc = chainRpcUrl(values.rpc, process.env);
  try {
    print(await fund(new Connection(rpc, 'confirmed'), mint, to, values.amount ?? '1000'));
  } catch (err) {
    if (err instanceof FaucetError) fail(err.message);
    fail(`the local chain at ${rpc} did not fund ${to.toBase58()}: ${oneLine(err)}`);
  }
  process.exit(0);
}

/** `gpu wallet ...` for a translated command. */
function gpuWalletArgs(): string[] {
  const file = keypairFile();
  const id = positionals[0] ?? values.wallet;
  const ids = id ? [id] : [];
  const rpc = values.rpc ? ['--rpc', values.rpc] : [];
  const amount = values.amount ? ['--amount', values.amount] : [];
  switch (command) {
    case 'open':
      if (!file) usageError('open needs --keypair FILE (or --test-wallet NAME)');
      return ['open', '--keypair', file];
    case 'deposit':
      if (values.signature) {
        if (file) usageError('a deposit by --signature names its wallet by ID or --address, not --keypair');
        const to = values.address ? ['--address', values.address] : ids;
        return ['deposit', ...to, '--signature', values.signature, ...amount];
      }
      if (values.address) usageError('deposit --address goes with --signature (a transfer made elsewhere)');
      if (!file || !values.amount)
        usageError('deposit needs --keypair FILE (or --test-wallet NAME) and --amount TOKENS');
      return ['deposit', ...ids, '--keypair', file, ...amount, ...rpc];
    case 'claim': {
      if (!values.signature) usageError('claim needs --signature SIG (and --wallet ID or --keypair FILE)');
      const address = values.address ?? (file ? addressOf(file) : undefined);
      return ['deposit', ...(address ? ['--address', address] : ids), '--signature', values.signature, ...amount];
    }
    default: {
      const address = values.address ?? (file ? addressOf(file) : undefined);
      return ['balance', ...(address ? ['--address', address] : ids)];
    }
  }
}

try {
  if (command === 'new') newKeypair(values.keypair);
  if (command === 'fund') await fundAddress();
  const args = TRANSLATED.includes(command) ? gpuWalletArgs() : passed;
  await runGpu(['wallet', ...args]);
} catch (err) {
  if (err instanceof SettingError) fail(err.message);
  throw err;
}

/**
 * Runs `gpu --json [--url] <args>` in this process: as gpu's saved sign-in, or as the one given for this command
 * alone (signed out after).
 */
async function runGpu(args: string[]): Promise<void> {
  const env = process.env;
  const { email, password } = values;
  const given = env.GPU_TOKEN;
  const once = Boolean(email && password) || Boolean(given);
  // A sign-in for this command alone saves nothing: a configuration folder of its own, gone after.
  const configDir = once ? mkdtempSync(path.join(tmpdir(), 'pnpm-wallet-')) : undefined;
  if (configDir) env.GPU_CONFIG_DIR = configDir;
  const url = platformUrl(values.url, env, readConfig(env).url).url;
  let refreshToken: string | undefined;
  if (given?.startsWith('gpk_')) {
    env.GPU_API_KEY = given;
    delete env.GPU_TOKEN;
  } else if (email && password && !given) {
    const pair = await authClient({ baseUrl: url })
      .POST('/api/v1/auth/login', { body: { email, password } })
      .then(unwrap)
      .catch((err: unknown) =>
        fail(
          err instanceof ApiError
            ? `signing in as ${email} at ${url}: auth answered ${err.message}`
            : `cannot reach the platform at ${url}: ${oneLine(err)}`,
        ),
      );
    env.GPU_TOKEN = pair.access_token;
    refreshToken = pair.refresh_token;
  }
  const argv = [process.argv[0]!, 'gpu', '--json', ...(values.url ? ['--url', values.url] : []), ...args];
  try {
    // JSON answers, as this tool always printed them; its failures stay one line of text.
    process.exitCode = await main(argv, { errors: 'text' });
  } finally {
    if (refreshToken) {
      await authClient({ baseUrl: url })
        .POST('/api/v1/auth/logout', { body: { refresh_token: refreshToken } })
        .catch(() => undefined);
    }
    if (configDir) rmSync(configDir, { recursive: true, force: true });
  }
}
