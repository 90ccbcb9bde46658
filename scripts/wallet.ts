/**
 * `pnpm wallet`: a user's platform wallet from the command line, with a Solana keypair file (as `solana-keygen new`
 * writes it). Deposits build the SPL transferChecked to the platform's treasury, send it, wait until final and have
 * billing credit it (`@gpu/client/solana`).
 *
 *   pnpm wallet open    --keypair ~/.config/solana/id.json            # a wallet for the keypair's address (proven)
 *   pnpm wallet deposit --keypair ~/.config/solana/id.json --amount 100
 *   pnpm wallet balance --keypair ~/.config/solana/id.json            # or --wallet ID
 *   pnpm wallet claim   --signature SIG [--amount 100] --wallet ID    # credit a transfer already sent
 *
 * A deposit whose transfer was sent but not credited (billing unreachable, say) prints its signature and the
 * `pnpm wallet claim` line that credits it later; claiming is idempotent (`deposit:<signature>`).
 *
 * Who you are: `--email`/`--password` (or GPU_EMAIL/GPU_PASSWORD; logs in at the auth service), or a bearer token in
 * GPU_TOKEN. Where: `--auth`, `--billing`, `--rpc` (or AUTH_URL, BILLING_URL, SOLANA_RPC_URL; defaults: what
 * `pnpm start` runs). The wallet is the caller's user wallet of the keypair's address, opened (and its address
 * proven) on first use; `--wallet ID` names one instead.
 */
import { parseArgs } from 'node:util';
import { ApiError, billingClient, staticToken, type TokenSource, unwrap, userLogin } from '@gpu/client';
import { claimDeposit, DepositClaimError, deposit, proveAddress, readKeypair } from '@gpu/client/solana';

const USAGE = `usage: pnpm wallet <open|deposit|balance|claim> [--keypair FILE] [--amount TOKENS] [--wallet ID]
                 [--signature SIG] [--email E --password P | GPU_TOKEN=...] [--auth URL] [--billing URL] [--rpc URL]`;

const { positionals, values } = parseArgs({
  allowPositionals: true,
  options: {
    keypair: { type: 'string' },
    amount: { type: 'string' },
    wallet: { type: 'string' },
    signature: { type: 'string' },
    email: { type: 'string', default: process.env.GPU_EMAIL },
    password: { type: 'string', default: process.env.GPU_PASSWORD },
    auth: { type: 'string', default: process.env.AUTH_URL ?? 'http://127.0.0.1:8000' },
    billing: { type: 'string', default: process.env.BILLING_URL ?? 'http://127.0.0.1:8003' },
    rpc: { type: 'string', default: process.env.SOLANA_RPC_URL ?? 'http://127.0.0.1:8899' },
    help: { type: 'boolean', short: 'h' },
  },
});

function fail(message: string): never {
  process.stderr.write(`${message}\n`);
  process.exit(2);
}

const command = positionals[0];
if (values.help || !command || !['open', 'deposit', 'balance', 'claim'].includes(command)) fail(USAGE);

let token: TokenSource;
if (values.email && values.password) {
  token = userLogin({ authUrl: values.auth, email: values.email, password: values.password });
} else if (process.env.GPU_TOKEN) {
  token = staticToken(process.env.GPU_TOKEN);
} else {
  fail('who are you? pass --email and --password (or GPU_EMAIL, GPU_PASSWORD), or set GPU_TOKEN');
}
const billing = billingClient({ baseUrl: values.billing, token });
const print = (value: unknown) => process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);

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

try {
  if (command === 'open') {
    if (!values.keypair) fail('open needs --keypair FILE');
    const keypair = readKeypair(values.keypair);
    const id = await walletId(keypair);
    await proveAddress(billing, id, keypair);
    print(unwrap(await billing.GET('/api/v1/wallet/{walletID}', { params: { path: { walletID: id } } })));
  } else if (command === 'deposit') {
    if (!values.keypair || !values.amount) fail('deposit needs --keypair FILE and --amount TOKENS');
    const keypair = readKeypair(values.keypair);
    const id = await walletId(keypair);
    await proveAddress(billing, id, keypair);
    print(await deposit({ billing, rpcUrl: values.rpc, keypair, walletId: id, amount: values.amount }));
  } else if (command === 'claim') {
    if (!values.signature) fail('claim needs --signature SIG (and --wallet ID or --keypair FILE)');
    const id = await walletId(values.keypair ? readKeypair(values.keypair) : undefined);
    print(await claimDeposit({ billing, walletId: id, signature: values.signature, amount: values.amount }));
  } else {
    const id = await walletId(values.keypair ? readKeypair(values.keypair) : undefined);
    print(unwrap(await billing.GET('/api/v1/wallet/{walletID}/balance', { params: { path: { walletID: id } } })));
  }
} catch (err) {
  if (err instanceof DepositClaimError) {
    process.stderr.write(
      `${err.message}\nsignature: ${err.signature}\nclaim it with: ${err.claimCommand} --billing ${values.billing}\n`,
    );
    process.exit(1);
  }
  process.stderr.write(`${err instanceof ApiError ? err.message : (err as Error).stack}\n`);
  process.exit(1);
}
