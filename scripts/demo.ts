/**
 * `pnpm demo`: a small GPU market from sign-up to on-chain payout, on the platform `pnpm start` runs (started here,
 * and stopped at the end, when it is not running yet; PLATFORM_PORT_BASE and PLATFORM_DATA_DIR as for `pnpm start`).
 *
 *  1. A provider signs up, creates a daemon client, and runs the reference provider daemon on a simulated machine
 *     (8 × H100, an explicit configuration): it registers the machine and heartbeats. The provider sets its rates and
 *     turns automatic payouts on, to a Solana address of its own.
 *  2. A renter signs up, gets platform tokens on the local chain (minted by the local chain's faucet, lib/faucet.ts,
 *     as `pnpm wallet fund` does), opens a wallet, proves its address and deposits (an SPL transferChecked to the treasury, credited by billing).
 *  3. The renter finds the machine on the market with its own token (offers of at least 4 free H100s, 90 % reliable,
 *     cheapest first: the offer's price per GPU-hour is the quote's, to the last digit), uploads a dataset, quotes 4
 *     of the machine's 8 GPUs, accepts the price and starts a session: billing prices those 4 from the registry's
 *     record, the machine stays on the market with 4 GPUs free. A second renter, funded the same way, finds those 4
 *     with its own token and rents them with a spend cap; the machine is busy, and a third renter is refused. The
 *     job reads the dataset and its output is uploaded with the daemon's uploader through a presigned URL the renter
 *     made; the renter reads it back. The daemon reports each session's usage from its own GPUs.
 *  4. The daemon is killed (SIGKILL) mid-session and started again: it finds its machine and the running session, and
 *     its usage reports resume. The second session ends at its cap once the time the cap pays for is over (a little
 *     over a minute), billed exactly to the cap, and its 4 GPUs are back on the market.
 *  5. The renter ends the session: billing charges the started minutes (the billing minute is not shortened).
 *  6. Workloads: the renter runs a job on 2 of the 8 GPUs in the daemon's bubblewrap sandbox (its input the
 *     dataset, read-only; its log followed in storage while it runs; its output a checksum in storage); the session
 *     ends when it exits, billed for the minutes it ran. A second job of an hour is stopped at its spend cap, billed
 *     exactly to it, and no process of it is left.
 *  7. Reach: the renter signs in with `gpu` and rents 4 GPUs with an idle workload (`gpu rent --idle`); `gpu exec`
 *     runs commands in it (its leased GPUs there and no other, exit statuses passed through) and writes a page there;
 *     a server started in it with `gpu exec` (the stream left open) serves the page through the gateway
 *     (`/api/v1/billing/sessions/{id}/ports/8000/`, the renter's token) and as a browser does (`gpu open`: a
 *     one-time link to the port's own address, its cookie), the workload counts the bytes, and
 *     `gpu end` cuts the stream.
 *  8. Interruptible: the provider lets the machine take bids (from 50 tokens per GPU-hour); the renter runs a job on
 *     all 8 GPUs at a bid of 60 (`gpu run --bid`, capped) and raises it to 70 (`gpu bid`). The second renter rents 4
 *     GPUs on demand: none is free, so the bid's GPUs are taken back at once, with notice; the job finds the notice
 *     (its file, then SIGTERM), saves and exits, `gpu run` says it was preempted (exit status 1), and the bid session
 *     is billed its one started minute at the raised bid, nothing after the notice. The provider's earnings of all
 *     seven sessions are paid out on chain (the demo waits until no payout is under way or due); the registry shows
 *     the machine idle again.
 *  9. Reconciliation, read back from billing and the chain: for each session renter paid = provider earned +
 *     platform fee (5 %), the payouts total the earnings (one too many, or too large, fails), each renter's wallet is
 *     what they deposited less their rentals and storage charges, and each on-chain balance (the renters'
 *     addresses, the payout address, the treasury) matches. Exit status 0 only when every line holds.
 * 10. Jobs: the provider brings a second machine; the renter submits a job that names what it needs, not where
 *     (`gpu jobs submit`), and follows it (`gpu jobs logs -f`). Its machine is lost mid-job (its daemon killed with
 *     SIGKILL, the workload with it); once the registry takes the silent machine for offline (90 s under pnpm
 *     start), the job runs on the other machine from its last checkpoint and succeeds, the renter paying both
 *     attempts' running minutes and nothing more.
 *
 * At its end, and on Ctrl-C (SIGINT) or SIGTERM too (then with exit status 130 or 143), it stops what it started
 * (its daemons and `gpu` runs, each holding a lifeline from it, so that none outlives even a `kill -9` of it),
 * removes its own folder (the daemons' configurations, their secrets in them), takes its machines off the market and
 * revokes their daemons' credentials, once.
 *
 * Every step talks to the services over HTTP with the typed client (@gpu/client), as a user's program would, through
 * the platform's one origin, the gateway (`pnpm start`'s at PLATFORM_PORT_BASE+10, or GATEWAY_URL); so does the
 * daemon. Only presigned URLs go to the object store itself, and the chain is the chain. The last
 * line is `DEMO OK {json}` (what happened, with the payout's signature), or the command fails naming the step.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { constants as osConstants, tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import {
  authClient,
  billingClient,
  clientCredentials,
  machineCredentials,
  objectStore,
  registryClient,
  TokenRequestError,
  type TokenSource,
  unwrap,
  userLogin,
} from '@gpu/client';
import { deposit, proveAddress } from '@gpu/client/solana';
import { LIFELINE_FD, lifelineEnv } from '@gpu/common/lifeline';
import { getAssociatedTokenAddressSync } from '@solana/spl-token';
import { Connection, Keypair, PublicKey } from '@solana/web3.js';
import { Decimal } from 'decimal.js';
import { uploadFile } from '../tools/provider-daemon/src/upload.ts';
import { jwksHoldsFolderKey, signUpRateLimited, usageResumeTimeoutMs } from './lib/demo-checks.ts';
import { DEMO_MINUTES, JOB_TERMS, standsFor } from './lib/demo-commands.ts';
import { payoutsSettled, type RenterFigures, reconcile } from './lib/demo-reconcile.ts';
import { localMint as dataFolderMint, fund } from './lib/faucet.ts';
import { readCaughtMail } from './lib/mail-catcher.ts';
import { platformDataDir, platformHost, platformPorts, repoRoot } from './lib/platform.ts';
import { STOP_TIMEOUT_MS } from './lib/supervisor.ts';
import { answerHelp, refuseArguments } from './lib/usage.ts';

answerHelp(`usage: pnpm demo

Plays a small GPU market from sign-up to on-chain payout, then a job that survives the loss of its machine (about
${DEMO_MINUTES} minutes, a minute and a half of it the registry's wait for a silent machine), every step over HTTP
through the gateway, each followed by the gpu command it stands for, and reconciles the money. At its end it takes
its machines off the market and revokes their daemons' credentials, names what stays in the data folder (the
accounts, their money's history, the renter's objects), and its last line is DEMO OK {...}, exit status 0 only when
every figure holds. Ctrl-C (or SIGTERM) stops it with the same clean-up, exit status 130 (143).
Uses the platform pnpm start runs, or starts one (and stops it at the end). Takes no arguments; its settings are
environment variables:

  PLATFORM_DATA_DIR, PLATFORM_PORT_BASE, PLATFORM_HOST   where the platform is, as for pnpm start
  GATEWAY_URL                                           the gateway (default: pnpm start's, PLATFORM_PORT_BASE+10)

See docs/demo.md.`);
refuseArguments('pnpm demo');

const ports = platformPorts();
const data = platformDataDir();
const { url } = platformHost();
/** Every call goes through the platform's one origin, the gateway (GATEWAY_URL, or `pnpm start`'s). */
const gatewayUrl = process.env.GATEWAY_URL || url(ports.gateway);
const urls = {
  gateway: gatewayUrl,
  auth: gatewayUrl,
  storage: gatewayUrl,
  registry: gatewayUrl,
  billing: gatewayUrl,
  rpc: url(ports.solana),
};
const work = mkdtempSync(path.join(tmpdir(), 'gpu-demo-'));
const children: ChildProcess[] = [];
/** The platform, when the demo started it (stopped at its end). */
let platformChild: ChildProcess | null = null;
/** What the demo made on the platform: taken away, or named, at its end (`tidyUp`). */
const made = {
  accounts: [] as string[],
  machines: [] as { id: string; name: string; token: TokenSource }[],
  clients: [] as { id: string; token: TokenSource }[],
  folders: [] as { email: string; id: string }[],
};
const started = Date.now();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * One step, said as it happened, and under it the command lines it stands for (`$ pnpm gpu ...`:
 * scripts/lib/demo-commands.ts); the demo's own checks stand for none.
 */
function say(step: string, detail = '', commands: string[] = []) {
  const t = ((Date.now() - started) / 1000).toFixed(1).padStart(6);
  process.stdout.write(`[demo ${t}s] ${step}${detail ? `: ${detail}` : ''}\n`);
  for (const command of commands) process.stdout.write(`           $ ${command}\n`);
}

/**
 * Polls `probe` until it returns a value (not undefined), or fails naming `what` and the probe's last error. A minute
 * by default: it costs nothing when the value comes, and a busy machine (CI's) can be slow to carry a message along.
 */
async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let failed: string | undefined;
  for (;;) {
    const value = await probe().then(
      (v) => {
        failed = undefined;
        return v;
      },
      (err: unknown) => {
        failed = err instanceof Error ? err.message : String(err);
        return undefined;
      },
    );
    if (value !== undefined) return value;
    if (Date.now() > deadline)
      throw new Error(`timed out waiting for ${what}${failed ? ` (its last check failed: ${failed})` : ''}`);
    await sleep(500);
  }
}

/**
 * Polls `probe` until it reports a value (`done`), or fails naming `what` and what the platform last reported, once
 * nothing it reports (`state`) has moved for `quietMs`, or after `maxMs` in all. For work the platform does on its own
 * schedule (automatic payouts every reconcile interval, then the chain): a loaded machine slows each step, which a
 * fixed deadline took for a failure, but the platform keeps reporting progress until the work is done.
 */
async function untilProgress<T>(
  what: string,
  probe: () => Promise<{ done?: T; state: string }>,
  quietMs: number,
  maxMs: number,
): Promise<T> {
  const end = Date.now() + maxMs;
  let last = '';
  let quietSince = Date.now();
  for (;;) {
    const seen = await probe().catch((err: Error) => ({ done: undefined, state: `unreadable: ${err.message}` }));
    if (seen.done !== undefined) return seen.done;
    if (seen.state !== last) {
      last = seen.state;
      quietSince = Date.now();
    }
    const now = Date.now();
    if (now - quietSince > quietMs || now > end) {
      const why = now > end ? `${maxMs / 1000} s in all` : `nothing moved for ${quietMs / 1000} s`;
      throw new Error(`timed out waiting for ${what} (${why}); the platform last reported ${last}`);
    }
    await sleep(1000);
  }
}

/** Whether the gateway and every service behind it answer their health routes UP (`/health/<service>`). */
const healthy = async () => {
  const up = async (path: string) =>
    (await fetch(`${urls.gateway}${path}`, { signal: AbortSignal.timeout(5000) }).catch(() => null))?.ok === true;
  const paths = ['/health', ...['auth', 'storage', 'provider-registry', 'billing'].map((s) => `/health/${s}`)];
  return (await Promise.all(paths.map(up))).every(Boolean);
};

/** The platform: the one already running, or `pnpm start` started here (`platformChild`, stopped at the end). */
async function platform(): Promise<void> {
  if (await healthy()) {
    say('platform', `using the one running behind the gateway at ${urls.gateway}`, standsFor('startPlatform'));
    return;
  }
  say('platform', 'not running: starting it', standsFor('startPlatform'));
  // With a lifeline from this process: a demo killed (even with SIGKILL) takes the platform it started with it. In a
  // process group of its own, so that a Ctrl-C at the terminal reaches the demo alone, which tidies up on the
  // platform before it stops it. Its output is passed on as it comes.
  const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/start.ts'], {
    cwd: repoRoot,
    env: { ...process.env, LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn', ...lifelineEnv(2 * STOP_TIMEOUT_MS) },
    stdio: ['ignore', 'pipe', 'inherit', 'pipe'],
    detached: true,
  });
  child.stdio[LIFELINE_FD]?.on('error', () => {});
  platformChild = child;
  children.push(child);
  // Up when it says so (`[start] up`, once every port of it opened): asked before, the gateway would answer 502 for
  // services not listening yet, which it logs as failures on the terminal.
  let up = false;
  let partial = '';
  child.stdout?.on('data', (d: Buffer) => {
    process.stdout.write(d);
    if (up) return;
    const lines = `${partial}${d}`.split('\n');
    partial = lines.pop() ?? '';
    up = lines.some((line) => line.startsWith('[start] up'));
  });
  await until(
    'the platform to come up',
    async () => {
      if (child.exitCode !== null) throw new Error('pnpm start exited');
      return up && (await healthy()) ? true : undefined;
    },
    300_000,
  ).catch((err) => {
    if (child.exitCode !== null) throw new Error('pnpm start failed: see its output above');
    throw err;
  });
}

/**
 * What the demo reads from the data folder, checked before it creates anything: the local chain's mint and its
 * authority's keypair (the faucet), of the platform that answers. The mint alone tells no data folder from another
 * (every local chain makes the same one, from fixed seeds), so the folder must also hold what only the running
 * platform's has: the key its auth service signs tokens with (made in `auth/` at the first start, published in its
 * JWKS) or, where it signs with none of the folder's (HS256, a key of the user's), the platform's machine client
 * (`auth/clients/platform.json`), whose secret that auth service alone takes. A data folder of another platform
 * (PLATFORM_DATA_DIR not the running `pnpm start`'s) fails here, naming the folder, rather than midway.
 */
async function checkDataFolder() {
  const whose = `PLATFORM_DATA_DIR (${data}) must be the data folder of the pnpm start running at ${urls.auth}`;
  const needed = ['solana/mint.json', 'solana/treasury-keypair.json'];
  const missing = needed.filter((file) => !existsSync(path.join(data, file)));
  if (missing.length > 0) throw new Error(`no ${missing.join(', ')} in the data folder: ${whose}`);
  const { mint } = unwrap(await billingClient({ baseUrl: urls.billing }).GET('/api/v1/deposits/instructions'));
  if (mint !== localMint().mint) {
    throw new Error(
      `billing takes deposits of the token ${mint}, the data folder's chain made ${localMint().mint}: ${whose}`,
    );
  }
  const authDir = path.join(data, 'auth');
  const jwks = unwrap(await authClient({ baseUrl: urls.auth }).GET('/.well-known/jwks.json'));
  if (jwksHoldsFolderKey(authDir, jwks.keys as Record<string, unknown>[])) {
    say('data folder', `${data} is the running platform's (it signs tokens with the folder's key; token ${mint})`);
    return;
  }
  const clientFile = path.join(authDir, 'clients', 'platform.json');
  let refused = 'the folder holds none';
  if (existsSync(clientFile)) {
    const client = clientCredentials({ authUrl: urls.auth, ...machineCredentials({ credentialsFile: clientFile }) });
    refused = await client.get().then(
      () => '',
      (err: Error) => {
        if (err instanceof TokenRequestError) return err.message;
        throw err;
      },
    );
  }
  if (refused) {
    throw new Error(
      `the running platform signs tokens with no key of the data folder, nor takes its platform client (${refused}): ${whose}`,
    );
  }
  say(
    'data folder',
    `${data} is the running platform's (its auth service takes the folder's platform client; token ${mint})`,
  );
}

/** A new user of the auth service with `roles`, logged in. */
async function signUp(role: 'provider' | 'renter', as: string = role) {
  const email = `demo-${role}-${randomBytes(4).toString('hex')}@example.com`;
  const password = `Demo-${randomBytes(12).toString('base64url')}-9!`;
  const auth = authClient({ baseUrl: urls.auth });
  const registered = await auth.POST('/api/v1/auth/register', { body: { email, password, roles: [role] } });
  // Auth's sign-ups per address: said in words, with what to do, rather than as a bare 429.
  if (registered.response.status === 429)
    throw new Error(signUpRateLimited(registered.response.headers.get('retry-after')));
  const { user } = unwrap(registered);
  const token: TokenSource = userLogin({ authUrl: urls.auth, email, password });
  await token.get();
  made.accounts.push(email);
  say(`${as} signed up`, `${email} (user ${user.id})`, standsFor('signUp', { gateway: urls.gateway, email, role }));
  return { id: user.id, email, password, token };
}

/**
 * Verifies the user's address as a person does: the code auth mailed at sign-up, read from what `pnpm start`'s mail
 * catcher caught (`pnpm mail`), sent back to auth with their sign-in (without it the code would take a new password);
 * their next token says so (payouts need it).
 */
async function verifyAddress(person: { email: string; token: TokenSource }) {
  const mailDir = path.join(data, 'mail');
  const code = await until(`the verification mail to ${person.email} in ${mailDir}`, async () => {
    const mail = (await readCaughtMail(mailDir)).find((m) => m.to === person.email);
    return mail ? /Your code:\s+(\S+)/.exec(mail.text)?.[1] : undefined;
  });
  unwrap(
    await authClient({ baseUrl: urls.auth, token: person.token }).POST('/api/v1/auth/email/verify', {
      body: { token: code },
    }),
  );
  person.token.invalidate?.();
  say(
    'address verified',
    `${person.email}, with the code mailed to it (pnpm mail shows it)`,
    standsFor('verifyAddress', { email: person.email }),
  );
}

/** The platform token the localnet's setup made (its mint.json). */
const localMint = () => dataFolderMint(data);

/** The platform-token balance of `owner`'s associated token account, read from the chain. */
async function chainBalance(connection: Connection, owner: PublicKey): Promise<string> {
  const ata = getAssociatedTokenAddressSync(new PublicKey(localMint().mint), owner);
  return (await connection.getTokenAccountBalance(ata, 'finalized')).value.uiAmountString ?? '0';
}

/** A token account's balance on chain (tokens, a decimal string). */
async function tokenAccountBalance(connection: Connection, account: string): Promise<string> {
  return (await connection.getTokenAccountBalance(new PublicKey(account), 'finalized')).value.uiAmountString ?? '0';
}

/**
 * The machine as a renter finds it on the market, with the renter's own token: offers of at least 4 free H100s from a
 * machine at least 90 % reliable, cheapest first, a few pages at most. Its offer, once billing's prices for it reached
 * the registry (billing's relay publishes them within a second or two).
 */
async function findOffer(token: TokenSource, machineId: string, priced: (pricePerGpuHour: string) => boolean) {
  const registry = registryClient({ baseUrl: urls.registry, token });
  return until('the machine on the market at its own price', async () => {
    let cursor: string | undefined;
    for (let page = 0; page < 5; page++) {
      const res = await registry.GET('/offers', {
        params: {
          query: {
            gpu_model: 'H100',
            min_free_gpus: 4,
            min_reliability: 0.9,
            sort: 'price',
            limit: 100,
            ...(cursor ? { cursor } : {}),
          },
        },
      });
      const offer = unwrap(res).find((o) => o.provider_id === machineId);
      if (offer) return priced(offer.price_per_gpu_hour) ? offer : undefined;
      cursor = res.response.headers.get('x-next-cursor') ?? undefined;
      if (!cursor) break;
    }
    return undefined;
  });
}

/** A renter signed up, funded on the local chain with `received` tokens, with a wallet credited `deposit` of them. */
async function fundedRenter(connection: Connection, as: string, received: number, depositAmount: string) {
  const renter = await signUp('renter', as);
  const key = Keypair.generate();
  await fund(connection, localMint(), key.publicKey, received);
  say(
    `${as} funded on the local chain`,
    `${received} tokens for ${key.publicKey.toBase58()} (localnet faucet)`,
    standsFor('fund', { address: key.publicKey.toBase58(), amount: String(received) }),
  );
  const billing = billingClient({ baseUrl: urls.billing, token: renter.token });
  const wallet = unwrap(
    await billing.POST('/api/v1/wallet', {
      body: { owner_type: 'user', owner_id: renter.id, solana_address: key.publicKey.toBase58() },
    }),
  );
  await proveAddress(billing, wallet.id, key);
  const deposited = await deposit({
    billing,
    rpcUrl: urls.rpc,
    keypair: key,
    walletId: wallet.id,
    amount: depositAmount,
  });
  say(
    `${as}'s deposit credited`,
    `${deposited.transaction.amount} tokens (signature ${deposited.signature})`,
    standsFor('deposit', { amount: depositAmount, wallet: wallet.id }),
  );
  return { ...renter, key, billing, wallet, received: String(received), deposited: deposited.transaction.amount };
}
type Renter = Awaited<ReturnType<typeof fundedRenter>>;

/** The machine the daemon registered, once its state file names it (it fails if the daemon exits first). */
function registeredBy(daemon: ChildProcess, stateFile: string, who: string): Promise<string> {
  return until(
    `${who} to register its machine`,
    async () => {
      if (daemon.exitCode !== null) throw new Error(`${who} exited`);
      if (!existsSync(stateFile)) return undefined;
      return (JSON.parse(readFileSync(stateFile, 'utf8')) as { provider_id?: string }).provider_id;
    },
    90_000,
  );
}

/**
 * The end of a lifeline from this process (scripts/lib/lifeline.ts), preloaded into each program the demo runs (its
 * daemons, `gpu`) as `pnpm start`'s supervisor preloads it into its children: when the demo is gone, however it went
 * (SIGKILL too), each stops as on SIGTERM, and is killed with what it started STOP_TIMEOUT_MS later.
 */
const lifeline = pathToFileURL(path.join(repoRoot, 'scripts/lib/lifeline.ts')).href;

/**
 * Starts a TypeScript program of the checkout (`script`) as the demo's child: with its lifeline on descriptor
 * LIFELINE_FD, in a process group of its own (a Ctrl-C at the terminal reaches the demo alone, which stops its
 * children in order: `stopChildren`). Refused once the demo is finishing, so that nothing starts behind its clean-up.
 */
function spawnProgram(
  script: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  stdio: ('ignore' | 'inherit' | 'pipe')[],
) {
  if (finishing) throw new Error('the demo is stopping');
  const child = spawn(process.execPath, ['--import', 'tsx', '--import', lifeline, script, ...args], {
    cwd: repoRoot,
    env: { ...env, ...lifelineEnv(STOP_TIMEOUT_MS) },
    stdio: [...stdio, 'pipe'],
    detached: true,
  });
  child.stdio[LIFELINE_FD]?.on('error', () => {});
  children.push(child);
  return child;
}

/** Spawns the reference provider daemon with its configuration file. */
function spawnDaemon(configFile: string): ChildProcess {
  return spawnProgram('tools/provider-daemon/src/main.ts', [], { ...process.env, DAEMON_CONFIG_FILE: configFile }, [
    'ignore',
    'inherit',
    'inherit',
  ]);
}

/** The session as billing shows it to `renter` now. */
async function sessionOf(renter: Renter, sessionId: string) {
  return unwrap(
    await renter.billing.GET('/api/v1/billing/current-usage/{sessionID}', {
      params: { path: { sessionID: sessionId } },
    }),
  );
}

/** What a renter's wallet and address say once the market closed, with what storage charged them. */
async function renterFigures(connection: Connection, renter: Renter, sessionCosts: string[]): Promise<RenterFigures> {
  const balance = unwrap(
    await renter.billing.GET('/api/v1/wallet/{walletID}/balance', { params: { path: { walletID: renter.wallet.id } } }),
  );
  const perBilling = unwrap(
    await renter.billing.GET('/api/v1/wallet/{walletID}/chain-balance', {
      params: { path: { walletID: renter.wallet.id } },
    }),
  );
  const storage = unwrap(
    await renter.billing.GET('/api/v1/billing/storage-usage', { params: { query: { user_id: renter.id } } }),
  );
  return {
    name: renter.email.split('@')[0]!,
    total: balance.total,
    available: balance.available,
    deposited: renter.deposited,
    sessionCosts,
    storageCharged: storage.map((c) => c.charged),
    received: renter.received,
    addressOnChain: await chainBalance(connection, renter.key.publicKey),
    addressPerBilling: perBilling.token_balance,
  };
}

/** Debian's bubblewrap, which the daemon runs workloads in: installed when missing (as root), else a clear refusal. */
function ensureSandbox(): void {
  if (spawnSync('bwrap', ['--version']).status === 0) return;
  if (process.getuid?.() !== 0) throw new Error('the workload scene needs bubblewrap: apt-get install bubblewrap');
  say('installing bubblewrap (the workload sandbox)', '', standsFor('installSandbox'));
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  spawnSync('apt-get', ['update', '-qq'], { stdio: 'ignore', env });
  const installed = spawnSync('apt-get', ['install', '-y', '-qq', 'bubblewrap'], { stdio: 'inherit', env });
  if (installed.status !== 0) throw new Error('apt-get install bubblewrap failed');
}

/** Whether a process on this machine runs for the session (the platform sets GPU_PLATFORM_SESSION_ID in its sandbox). */
function processOfSession(sessionId: string): boolean {
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      if (readFileSync(`/proc/${pid}/environ`, 'latin1').includes(`GPU_PLATFORM_SESSION_ID=${sessionId}`)) return true;
    } catch {
      // Gone meanwhile, or not ours to read.
    }
  }
  return false;
}

/**
 * The workload scene: a renter finds the machine with its own token and runs a job on 2 of its 8 GPUs in the
 * daemon's bubblewrap sandbox, reading the dataset (its input, read-only) and writing a checksum (its output); it
 * follows the job's log in its storage while it runs, the session ends when the job exits, billed for the minutes it
 * ran, and the output is in its storage. A second job that would run for an hour is stopped at its spend cap, billed
 * exactly to it, and no process of it is left.
 */
async function workloadScene(worker: Renter, machineId: string, datasetKey: string, dataset: string) {
  const offer = await findOffer(worker.token, machineId, () => true);
  say(
    'renter found the machine again, for a job of its own',
    `${offer.free_gpus} free ${offer.gpu_model}`,
    standsFor('findOffer', { gpus: '4' }),
  );
  const objects = objectStore({ baseUrl: urls.storage, token: worker.token });
  const quote = unwrap(
    await worker.billing.POST('/api/v1/pricing/calculate', {
      body: { gpu_model: 'H100', gpu_count: 2, provider_id: machineId },
    }),
  );
  const run = async (workload: object, extra: { spend_cap?: string } = {}) =>
    unwrap(
      await worker.billing.POST('/api/v1/billing/start-session', {
        body: {
          user_id: worker.id,
          wallet_id: worker.wallet.id,
          provider_id: machineId,
          job_id: randomUUID(),
          gpu_model: 'H100',
          gpu_count: 2,
          requested_vram_mb: 0,
          estimated_power_w: 0,
          accepted_hourly_rate: quote.total_hourly_rate,
          workload: workload as never,
          ...extra,
        },
      }),
    );
  // The job: an argv (the renter's own shell script, never a string the platform runs through a shell).
  const job = await run({
    command: [
      'sh',
      '-c',
      'echo "GPUs: $CUDA_VISIBLE_DEVICES"; echo "rows: $(wc -l < /work/inputs/data.csv)"; ' +
        'for epoch in 1 2 3 4; do echo "epoch $epoch"; sleep 1; done; ' +
        'sha256sum < /work/inputs/data.csv | cut -d" " -f1 > /work/output/checksum.txt; echo done',
    ],
    inputs: [{ key: datasetKey, path: 'data.csv' }],
    max_runtime_seconds: 600,
  });
  const jobId = job.session.id;
  say(
    'workload job started',
    `${jobId} on GPUs ${job.session.gpu_indices?.join(', ')} of the machine, in the sandbox`,
    standsFor('runJob', { machine: machineId, wallet: worker.wallet.id, input: datasetKey }),
  );
  // An hour-long job, capped: the cap pays for its first minute and a little more.
  const cap = new Decimal(quote.total_hourly_rate).div(60).mul(1.05).toDecimalPlaces(6, Decimal.ROUND_UP).toFixed(6);
  const long = await run({ command: ['sleep', '3600'], max_runtime_seconds: 3600 }, { spend_cap: cap });
  say(
    'an hour-long job started with a spend cap',
    `${long.session.id} on GPUs ${long.session.gpu_indices?.join(', ')}, at most ${cap} tokens`,
    standsFor('runCappedJob', { machine: machineId, wallet: worker.wallet.id, cap }),
  );
  const workloadOf = async (id: string) =>
    unwrap(
      await worker.billing.GET('/api/v1/billing/sessions/{sessionID}/workload', {
        params: { path: { sessionID: id } },
      }),
    );
  // Its log, followed in the renter's storage while it runs.
  const logKey = `sessions/${jobId}/logs/stdout.log`;
  const live = await until("the job's log in storage while it runs", async () => {
    const text = await (await objects.download({ key: logKey })).text();
    return text.includes('epoch 1') ? text : undefined;
  });
  say(
    "followed the job's log in storage while it ran",
    JSON.stringify(live.trim().split('\n').slice(0, 3)),
    standsFor('followLog', { session: jobId }),
  );
  const done = await until(
    'the job to exit and end its session',
    async () => {
      const w = await workloadOf(jobId);
      return w.outputs !== null && w.session.status === 'completed' ? w : undefined;
    },
    60_000,
  );
  if (done.state !== 'exited' || done.exit_code !== 0 || done.session.end_reason !== 'workload_exited') {
    throw new Error(`the job ended ${done.state} ${done.exit_code} ${done.session.end_reason}`);
  }
  const outputKey = done.outputs?.[0]?.key ?? '';
  const checksum = (await (await objects.download({ key: outputKey })).text()).trim();
  const expected = createHash('sha256').update(dataset).digest('hex');
  if (checksum !== expected) throw new Error(`the job's output ${outputKey} holds ${checksum}, not ${expected}`);
  const history = unwrap(
    await worker.billing.GET('/api/v1/billing/history', { params: { query: { user_id: worker.id } } }),
  );
  const record = history.find((r) => r.session_id === jobId);
  if (!record) throw new Error("the job's billing record is missing");
  const ranMs = Date.parse(done.ended_at ?? '') - Date.parse(done.running_at ?? '');
  const owed = new Decimal(record.total_hourly_rate)
    .mul(Math.ceil(ranMs / 60_000))
    .div(60)
    .toDecimalPlaces(6, Decimal.ROUND_HALF_EVEN);
  if (!owed.eq(record.total_cost))
    throw new Error(`the job ran ${ranMs} ms and cost ${record.total_cost}, not ${owed}`);
  say(
    'the job exited, its session ended with it, its output in storage',
    `${outputKey} = sha256 of the dataset; ran ${(ranMs / 1000).toFixed(1)} s from running to exit: ` +
      `${record.billed_minutes} started minute(s), ${record.total_cost} tokens (preparation not billed)`,
    standsFor('download', { key: outputKey }),
  );
  const stopped = await until(
    'the capped job to be stopped at its cap',
    async () => {
      const w = await workloadOf(long.session.id);
      return w.state === 'stopped' && w.session.status === 'completed' ? w : undefined;
    },
    150_000,
  );
  const cappedRecord = unwrap(
    await worker.billing.GET('/api/v1/billing/history', { params: { query: { user_id: worker.id } } }),
  ).find((r) => r.session_id === long.session.id);
  if (stopped.session.end_reason !== 'spend_cap' || cappedRecord?.total_cost !== cap) {
    throw new Error(`the capped job ended ${stopped.session.end_reason} at ${cappedRecord?.total_cost}`);
  }
  if (processOfSession(long.session.id)) throw new Error('a process of the capped job is still running');
  say(
    'the hour-long job was stopped at its spend cap',
    `${cappedRecord.total_cost} tokens, exactly the cap; stopped (${stopped.reason}), no process of it left`,
    standsFor('sessionEnded'),
  );
  return { record, cappedRecord, outputKey };
}

/**
 * The spot scene: the provider lets the machine take bids, from 50 tokens per GPU-hour. The renter runs a job on all
 * 8 GPUs at a bid of 60 with `gpu run --bid` (capped), and raises it to 70 with `gpu bid`. The second renter rents 4
 * GPUs on demand: there are none free, so the bid's GPUs are taken back at once. Its workload finds the notice (the
 * file, then SIGTERM), saves and exits in its grace; `gpu run` ends with "preempted at ... with 30 s notice" and exit
 * status 1. The bid session was billed its one started minute at the raised bid, and nothing after the notice.
 */
async function spotScene(renter: Renter, second: Renter, machineId: string, setBidFloor: () => Promise<unknown>) {
  await setBidFloor();
  say(
    'provider lets the machine take bids',
    'from 50 tokens per GPU-hour: idle GPUs sold cheaper, taken back with notice',
    standsFor('setBidFloor', { machine: machineId }),
  );
  const script =
    'echo "running at a bid on GPUs $CUDA_VISIBLE_DEVICES"; ' +
    'trap \'echo "told to stop: $(cat "$GPU_PLATFORM_NOTICE_FILE")"; echo "saved; exiting"; exit 0\' TERM; ' +
    'while :; do sleep 1; done';
  const values = { machine: machineId, wallet: renter.wallet.id };
  const run = gpu(renter, [
    'run',
    ...['--machine', machineId, '--gpu-model', 'H100', '--gpus', '8', '--wallet', renter.wallet.id],
    ...['--bid', '60', '--spend-cap', '20', '--max-runtime', '10m', '--', 'sh', '-c', script],
  ]);
  const running = await until(
    'the job at a bid to run',
    async () => {
      const list = unwrap(
        await renter.billing.GET('/api/v1/billing/sessions', {
          params: { query: { provider_id: machineId, user_id: renter.id, status: ['running'] } },
        }),
      );
      const atBid = list.find((x) => x.bid !== null);
      if (!atBid) return undefined;
      const w = unwrap(
        await renter.billing.GET('/api/v1/billing/sessions/{sessionID}/workload', {
          params: { path: { sessionID: atBid.id } },
        }),
      );
      return w.state === 'running' ? atBid : undefined;
    },
    120_000,
  );
  say(
    'renter runs a job on all 8 GPUs at a bid',
    `session ${running.id}: ${running.rates.total_hourly_rate} tokens an hour (60 per GPU-hour), at most 20 tokens`,
    standsFor('runAtBid', values),
  );
  const raised = await gpu(renter, ['bid', running.id, '--price', '70']).exited;
  if (raised.code !== 0) throw new Error(`gpu bid failed: ${raised.stderr.trim()}`);
  say('renter raises its bid', '', standsFor('raiseBid', { session: running.id }));
  shows(raised.stdout);

  // The second renter rents 4 on demand, capped to its first minute and a little more: none is free, so the bid's
  // GPUs are taken back.
  const quote = unwrap(
    await second.billing.POST('/api/v1/pricing/calculate', {
      body: { gpu_model: 'H100', gpu_count: 4, provider_id: machineId },
    }),
  );
  const cap = new Decimal(quote.total_hourly_rate).div(60).mul(1.05).toDecimalPlaces(6, Decimal.ROUND_UP).toFixed(6);
  const won = unwrap(
    await second.billing.POST('/api/v1/billing/start-session', {
      body: {
        user_id: second.id,
        wallet_id: second.wallet.id,
        provider_id: machineId,
        job_id: randomUUID(),
        gpu_model: 'H100',
        gpu_count: 4,
        requested_vram_mb: 0,
        estimated_power_w: 0,
        accepted_hourly_rate: quote.total_hourly_rate,
        spend_cap: cap,
      },
    }),
  );
  const taken = unwrap(
    await renter.billing.GET('/api/v1/billing/sessions/{sessionID}/workload', {
      params: { path: { sessionID: running.id } },
    }),
  );
  if (taken.session.end_reason !== 'preempted' || taken.session.preempted_by !== won.session.id || !taken.notice) {
    throw new Error(`the bid session was not taken back: ${JSON.stringify(taken.session)}`);
  }
  say(
    'second renter rents 4 GPUs on demand: none free, so the bid is taken back',
    `session ${won.session.id} on GPUs ${won.session.gpu_indices?.join(', ')}; the bid session ended preempted at ` +
      `${taken.notice.at}, its workload told to stop by ${taken.notice.deadline}`,
    standsFor('rentCapped', { machine: machineId, gpus: '4', wallet: second.wallet.id, cap }),
  );
  const ended = await until('gpu run to end with the preempted job', async () => run.ended(), 120_000);
  if (ended.code !== 1 || !ended.stderr.includes('preempted at') || !ended.stdout.includes('told to stop')) {
    throw new Error(`gpu run ended ${ended.code}: ${ended.stdout}${ended.stderr}`);
  }
  say(
    'gpu run saw the notice inside the workload and said so',
    `exit status ${ended.code}`,
    standsFor('runAtBid', values),
  );
  shows(`${ended.stdout}${ended.stderr}`);

  // The winner's rental ends; the bid session was billed to the notice, at the raised bid.
  const wonEnd = unwrap(
    await second.billing.POST('/api/v1/billing/end-session', { body: { session_id: won.session.id } }),
  );
  const history = unwrap(
    await renter.billing.GET('/api/v1/billing/history', { params: { query: { user_id: renter.id } } }),
  );
  const record = history.find((r) => r.session_id === running.id);
  const owed = new Decimal(70).mul(8).div(60).toDecimalPlaces(6, Decimal.ROUND_HALF_EVEN);
  if (record?.billed_minutes !== 1 || !owed.eq(record.total_cost)) {
    throw new Error(`the preempted session was billed ${JSON.stringify(record)}, not one minute at 70 × 8 per hour`);
  }
  say(
    'the preempted session was billed to the notice',
    `${record.total_cost} tokens: its one started minute at the raised bid (8 GPUs × 70 per hour); the grace was free`,
    standsFor('sessionEnded'),
  );
  return { record, winnerRecord: wonEnd.billing_record };
}

/** What a run of `gpu` printed, and its exit status. */
interface GpuRun {
  code: number;
  /** The signal that ended it, if one did. */
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/**
 * `gpu` (`pnpm gpu`) as `who` runs it, at the gateway, with a config folder of its own in the demo's folder (its
 * saved sign-in there, never the caller's): a child process, what it prints collected, its standard input `input`
 * (ended), or left open with `keepInput` (a server it runs lives while it is). Settles when it exits.
 */
function gpu(who: { email: string }, args: string[], opts: { input?: string; keepInput?: boolean; env?: object } = {}) {
  const { GPU_API_KEY: _ignored, ...env } = process.env;
  const child = spawnProgram(
    'tools/cli/src/main.ts',
    args,
    { ...env, GPU_URL: urls.gateway, GPU_CONFIG_DIR: path.join(work, `gpu-${who.email}`), ...opts.env },
    ['pipe', 'pipe', 'pipe'],
  );
  if (!child.stdout || !child.stderr || !child.stdin) throw new Error('gpu started without its pipes');
  const seen = { stdout: '', stderr: '' };
  child.stdout.on('data', (d: Buffer) => {
    seen.stdout += String(d);
  });
  child.stderr.on('data', (d: Buffer) => {
    seen.stderr += String(d);
  });
  child.stdin.on('error', () => {});
  if (opts.input !== undefined) child.stdin.write(opts.input);
  if (!opts.keepInput) child.stdin.end();
  let ended: GpuRun | undefined;
  const exited = new Promise<GpuRun>((resolve) =>
    child.once('close', (code, signal) => {
      ended = { code: code ?? 128 + (signal ? osConstants.signals[signal] : 127), signal, ...seen };
      resolve(ended);
    }),
  );
  return { seen, exited, ended: () => ended };
}

/** Prints what a command printed, indented under the line that names it. */
/**
 * A GET through the gateway to a port host (`<session>-<port>.ports.localhost:<port>`), as a browser sends it (the
 * name is this machine's for a browser; here the request goes to the gateway's address with that Host).
 */
function atHost(host: string, target: string, cookie?: string) {
  const gateway = new URL(urls.gateway);
  return new Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }>((resolve, reject) => {
    const req = http.get(
      {
        host: gateway.hostname,
        port: gateway.port,
        path: target,
        headers: { host, ...(cookie ? { cookie } : {}) },
        timeout: 30_000,
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => {
          body += d;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      },
    );
    req.on('timeout', () => req.destroy(new Error(`no answer from ${host}${target}`)));
    req.on('error', reject);
  });
}

function shows(text: string) {
  for (const line of text.replace(/\n$/, '').split('\n')) process.stdout.write(`           | ${line}\n`);
}

/** `gpu exec` of a shell command in the session's workload, printed as a renter sees it; what it printed. */
async function gpuExec(who: { email: string }, sessionId: string, script: string, input?: string): Promise<GpuRun> {
  say(
    'renter runs a command in the workload',
    '',
    standsFor('exec', {
      session: sessionId,
      command: `sh -c '${script}'${input === undefined ? '' : ' < index.html'}`,
    }),
  );
  const run = await gpu(who, ['exec', sessionId, '--', 'sh', '-c', script], { input }).exited;
  shows(`${run.stdout}${run.stderr}(exit status ${run.code})`);
  return run;
}

/**
 * The reach scene: the renter signs in with `gpu`, rents 4 GPUs of the machine with an idle workload
 * (`gpu rent --idle`), and reaches it through the platform, the machine opening no port: `gpu exec` runs commands in
 * it (its leased GPUs there and no other, exit statuses passed through, a page written through standard input), a
 * server started in it with `gpu exec` left open serves the page through the gateway
 * (`/api/v1/billing/sessions/{id}/ports/8000/`, with the renter's token), the workload counts the bytes that passed,
 * and ending the session (`gpu end`) cuts the stream that kept the server.
 */
async function reachScene(renter: Renter, machineId: string) {
  // 4 GPUs: a minute of them earns the provider more than its minimum payout (10 tokens), so this last session's
  // earnings are paid out on their own (a minute of 2 would wait under the minimum for more sessions that never come).
  const gpus = 4;
  const login = await gpu(renter, ['login', '--email', renter.email], { env: { GPU_PASSWORD: renter.password } })
    .exited;
  if (login.code !== 0) throw new Error(`gpu login failed: ${login.stderr.trim()}`);
  say('renter signed in with the command line', login.stdout.trim(), standsFor('login', { email: renter.email }));
  const rent = await gpu(renter, [
    '--json',
    'rent',
    '--idle',
    '--machine',
    machineId,
    '--gpu-model',
    'H100',
    '--gpus',
    String(gpus),
    '--wallet',
    renter.wallet.id,
    '--max-runtime',
    '15m',
  ]).exited;
  if (rent.code !== 0) throw new Error(`gpu rent --idle failed: ${rent.stderr.trim()}`);
  const { session } = JSON.parse(rent.stdout) as { session: { id: string; gpu_indices?: number[] } };
  const id = session.id;
  const leased = session.gpu_indices ?? [];
  say(
    'renter rented an idle workload',
    `session ${id} on GPUs ${leased.join(', ')} of the machine`,
    standsFor('rentIdle', { machine: machineId, gpus: String(gpus), wallet: renter.wallet.id }),
  );
  const workloadOf = async () =>
    unwrap(
      await renter.billing.GET('/api/v1/billing/sessions/{sessionID}/workload', {
        params: { path: { sessionID: id } },
      }),
    );
  const running = await until(
    'the idle workload to run',
    async () => {
      const w = await workloadOf();
      return w.state === 'pending' || w.state === 'preparing' ? undefined : w;
    },
    180_000,
  );
  if (running.state !== 'running') throw new Error(`the idle workload ${running.state} (${running.reason})`);
  say(
    'the workload runs',
    "in the daemon's sandbox, no program of its own: the renter reaches it",
    standsFor('sessions'),
  );

  // What is in there: the machine's kernel, the workload's own user, the GPUs it leased. A simulated machine's GPUs
  // are stand-in files where the device nodes would be (nvidia-smi is not there).
  const look =
    'uname -srm; id; echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"; ' +
    'nvidia-smi -L 2>/dev/null || for d in /dev/nvidia[0-9]*; do echo "$d: $(cat "$d")"; done';
  // The reach link of the daemon (restarted in the market scene) may still be connecting: the first try is repeated.
  const seen = await until(
    'gpu exec to reach the workload',
    async () => {
      const run = await gpuExec(renter, id, look);
      if (run.code !== 0 && /DAEMON_NOT_CONNECTED|WORKLOAD_NOT_RUNNING/.test(run.stderr)) return undefined;
      return run;
    },
    120_000,
  );
  const devices = [...seen.stdout.matchAll(/^\/dev\/nvidia(\d+):/gm)].map((m) => Number(m[1]));
  if (seen.code !== 0 || devices.join() !== leased.join()) {
    throw new Error(`gpu exec saw GPUs ${devices.join(', ')} (exit ${seen.code}), the session leased ${leased}`);
  }
  say('these are your GPUs', `${devices.map((d) => `/dev/nvidia${d}`).join(', ')}: the ${gpus} leased, no other`);
  const other = [0, 1, 2, 3, 4, 5, 6, 7].find((i) => !leased.includes(i));
  const absent = await gpuExec(renter, id, `cat /dev/nvidia${other}`);
  if (absent.code === 0) throw new Error(`the workload reads GPU ${other}, which it did not lease`);
  say('another GPU of the machine is not there', `its exit status ${absent.code} is gpu exec's`);

  const where = `session ${id}, on GPUs ${leased.join(', ')} of ${machineId}`;
  const page = `<!doctype html>\n<title>inside</title>\n<p>Served from inside ${where}.</p>\n`;
  const wrote = await gpuExec(
    renter,
    id,
    'mkdir -p /tmp/www && cat > /tmp/www/index.html && wc -c /tmp/www/index.html',
    page,
  );
  if (wrote.code !== 0) throw new Error('writing the page in the workload failed');

  // A server in the workload, alive while the exec stream that started it stays open (its standard input unended).
  const serve = ['python3', '-u', '-m', 'http.server', '8000', '--bind', '127.0.0.1', '-d', '/tmp/www'];
  say('renter starts a server in it (left running)', '', standsFor('exec', { session: id, command: serve.join(' ') }));
  const before = (await workloadOf()).reach;
  const server = gpu(renter, ['exec', id, '--', ...serve], { keepInput: true });
  // It says when it listens (its output comes through the stream as it is printed)...
  await until(
    'the server in the workload to listen',
    async () => (server.ended() || /^Serving HTTP/m.test(server.seen.stdout) ? true : undefined),
    300_000,
  );
  const portUrl = `${urls.gateway}/api/v1/billing/sessions/${id}/ports/8000/`;
  // ...and answers through the gateway (502 PORT_NOT_LISTENING until it does), unless its stream ended.
  const served = await until(
    'the server in the workload to answer through the gateway',
    async () => {
      if (server.ended()) return { res: null, body: 'its gpu exec ended' };
      const res = await fetch(portUrl, {
        headers: { authorization: `Bearer ${await renter.token.get()}` },
        signal: AbortSignal.timeout(30_000),
      });
      const body = await res.text();
      return res.status === 200 ? { res, body } : undefined;
    },
    120_000,
  ).catch((err: Error) => ({ res: null, body: err.message }));
  if (!served.res || served.body !== page) {
    const printed = `${server.seen.stdout}${server.seen.stderr}`.trim();
    throw new Error(`the server in the workload did not serve the page (${served.body}); its gpu exec: ${printed}`);
  }
  say(
    'renter read the page through the gateway, with its own token',
    `GET /api/v1/billing/sessions/${id}/ports/8000/: ${served.res.status} ${served.res.headers.get('content-type')}`,
    standsFor('readPort', { gateway: urls.gateway, session: id }),
  );
  shows(served.body);
  // A browser's way in: a one-time link to the port at an address of its own, opened as a browser opens it.
  const opened = await gpu(renter, ['open', id, '8000']).exited;
  if (opened.code !== 0) throw new Error(`gpu open failed: ${opened.stderr.trim()}`);
  const link = new URL(opened.stdout.trim());
  say(
    'renter made a link to the port for a browser',
    `${link.origin}/?gpu-port-ticket=...`,
    standsFor('openPort', { session: id }),
  );
  const signedIn = await atHost(link.host, `${link.pathname}${link.search}`);
  const grant = String(signedIn.headers['set-cookie'] ?? '').split(';')[0] ?? '';
  const location = String(signedIn.headers.location ?? '');
  if (signedIn.status !== 303 || !grant.startsWith('gpu_port_grant=')) {
    throw new Error(`opening the link answered ${signedIn.status}: ${signedIn.body}`);
  }
  const inBrowser = await atHost(link.host, location, grant);
  if (inBrowser.status !== 200 || inBrowser.body !== page) {
    throw new Error(`the page at ${link.origin} answered ${inBrowser.status}: ${inBrowser.body.slice(0, 200)}`);
  }
  const again = await atHost(link.host, `${link.pathname}${link.search}`);
  say(
    "a browser opened it: the page at the port's own address",
    `${link.origin}${location}: ${inBrowser.status} with the cookie the link set (HttpOnly, that host alone); ` +
      `the link a second time: ${again.status}`,
  );
  if (again.status !== 401) throw new Error(`the link opened twice (${again.status})`);
  const counted = await until(
    "the workload's reach byte counts",
    async () => {
      const w = await workloadOf();
      return w.reach.bytes_out - before.bytes_out >= page.length ? w.reach : undefined;
    },
    60_000,
  );
  say(
    'the workload counts what passed',
    `reach: ${counted.bytes_in} bytes in (to it), ${counted.bytes_out} bytes out (from it)`,
    standsFor('sessions'),
  );

  say('renter ends the session', '', standsFor('end', { session: id }));
  const ended = await gpu(renter, ['end', id]).exited;
  shows(`${ended.stdout}${ended.stderr}(exit status ${ended.code})`);
  if (ended.code !== 0) throw new Error('gpu end failed');
  const cut = await until("the server's stream to be cut", async () => server.ended(), 60_000);
  say(
    'the stream that kept the server was cut',
    `gpu exec of the server exited ${cut.code}${cut.signal ? ` (${cut.signal})` : ''}`,
  );
  shows(`${cut.stdout}${cut.stderr}`.trim());
  const after = await fetch(portUrl, { headers: { authorization: `Bearer ${await renter.token.get()}` } });
  const refusal = (await after.json()) as { code?: string };
  if (after.status !== 409 || refusal.code !== 'SESSION_NOT_ACTIVE') {
    throw new Error(`the port of the ended session answered ${after.status} ${refusal.code}`);
  }
  say(
    'its port now answers',
    `${after.status} ${refusal.code}`,
    standsFor('readPort', { gateway: urls.gateway, session: id }),
  );
  const record = unwrap(
    await renter.billing.GET('/api/v1/billing/history', { params: { query: { user_id: renter.id } } }),
  ).find((r) => r.session_id === id);
  if (!record) throw new Error("the reach session's billing record is missing");
  say(
    'reach session billed',
    `${record.billed_minutes} started minute(s) of its ${gpus} GPUs, ${record.total_cost} tokens`,
    standsFor('sessionEnded'),
  );
  return { record, reach: counted };
}

/**
 * The jobs scene: a job survives the loss of its machine. The provider brings a second machine (its own daemon, the
 * same 8 × H100 at the same rates); the renter submits a job with `gpu jobs submit` that says what it needs, not
 * where (1 H100, at most 300 tokens per GPU-hour, a spend cap, /work/checkpoint/ kept every 5 s), and follows it
 * with `gpu jobs logs -f`. The job counts steps into its checkpoint. Once one is kept, the machine it runs on is lost:
 * its daemon is killed (SIGKILL), its workload with it, and it heartbeats no more. The registry takes the machine
 * for offline once its silence bound is over (90 s under pnpm start), billing ends the attempt `provider_offline`
 * and places the job on the other machine, which restores the checkpoint before the workload starts: the count goes
 * on from there, not from 0. The job succeeds, and the renter's wallet paid its two attempts and nothing more.
 */
async function jobScene(renter: Renter, daemons: Map<string, ChildProcess>) {
  const balance = async () =>
    unwrap(
      await renter.billing.GET('/api/v1/wallet/{walletID}/balance', {
        params: { path: { walletID: renter.wallet.id } },
      }),
    );
  const before = await balance();
  // Counts on from what its checkpoint holds, each step written whole (by rename), saying where it began: from
  // nothing it counts for good (until its machine is lost), from a checkpoint 40 steps more, then it ends.
  const count =
    'd=$GPU_PLATFORM_CHECKPOINT_DIR; n=$(cat "$d/n" 2>/dev/null || echo 0); echo "from $n"; ' +
    'if [ "$n" -gt 0 ]; then end=$((n+40)); else end=100000000; fi; ' +
    'while [ "$n" -lt "$end" ]; do n=$((n+1)); echo "$n" > "$d/n.tmp"; mv "$d/n.tmp" "$d/n"; sleep 0.1; done; ' +
    'echo "done at $n"';
  const submit = ['jobs', 'submit', '--wallet', renter.wallet.id, ...JOB_TERMS];
  say('renter submits a job: what it needs, not where', '', standsFor('submitJob', { wallet: renter.wallet.id }));
  const submitted = await gpu(renter, ['--json', ...submit, '--', 'sh', '-c', count]).exited;
  if (submitted.code !== 0) throw new Error(`gpu jobs submit failed: ${submitted.stderr.trim()}`);
  const jobId = (JSON.parse(submitted.stdout) as { id: string }).id;
  const followed = gpu(renter, ['jobs', 'logs', jobId, '-f']);
  const readJob = async () =>
    unwrap(await renter.billing.GET('/api/v1/billing/jobs/{jobID}', { params: { path: { jobID: jobId } } }));
  const kept = await until(
    'the job to run and keep a checkpoint',
    async () => {
      const job = await readJob();
      return job.state === 'running' && job.checkpoint ? job : undefined;
    },
    180_000,
  );
  const first = kept.attempts.at(-1)!;
  const lost = daemons.get(first.provider_id);
  if (!lost) throw new Error(`the job runs on ${first.provider_id}, not a machine of the demo`);
  say(
    'job placed on the cheapest machine that meets its terms; it runs and keeps its checkpoint',
    `job ${jobId} on ${first.provider_id}; /work/checkpoint/ kept as ${kept.checkpoint?.key}`,
    standsFor('showJob', { job: jobId }),
  );

  // The machine is lost: its daemon killed, the sandbox dying with its parent, no heartbeat any more.
  lost.kill('SIGKILL');
  await new Promise((r) => (lost.exitCode !== null || lost.signalCode !== null ? r(null) : lost.once('exit', r)));
  const lostAt = Date.now();
  const objects = objectStore({ baseUrl: urls.storage, token: renter.token });
  const tar = Buffer.from(await (await objects.download({ key: kept.checkpoint!.key })).bytes());
  const saved = Number(spawnSync('tar', ['-xOf', '-', './n'], { input: tar }).stdout.toString().trim());
  if (!(saved > 0)) throw new Error(`the checkpoint kept holds no count (${saved})`);
  say(
    'its machine is lost',
    `the daemon killed (SIGKILL) with the job's workload; its last checkpoint holds ${saved}`,
    standsFor('killDaemon'),
  );

  const recovering = await until(
    'the registry to take the lost machine for offline, and billing to end the attempt',
    async () => {
      const job = await readJob();
      return job.attempts[0]?.ended_at ? job : undefined;
    },
    300_000,
  );
  say(
    'the registry took the silent machine for offline; billing ended the attempt',
    `${((Date.now() - lostAt) / 1000).toFixed(0)} s after the loss: attempt 1 ${recovering.attempts[0]!.end_reason}, ` +
      `billed ${recovering.attempts[0]!.cost} tokens (a lost machine's minutes are paid as far as its daemon's usage ` +
      `reports vouched for them); the job is ${recovering.state}`,
    standsFor('showJob', { job: jobId }),
  );
  const done = await until(
    'the job to end',
    async () => {
      const job = await readJob();
      return ['succeeded', 'failed', 'cancelled'].includes(job.state) ? job : undefined;
    },
    180_000,
  );
  const logs = await until('gpu jobs logs -f to end with the job', async () => followed.ended(), 60_000);
  say(
    'renter followed the job across its attempts',
    `exit status ${logs.code}`,
    standsFor('followJob', { job: jobId }),
  );
  shows(`${logs.stdout}${logs.stderr}`);
  const second = done.attempts[1];
  if (
    done.state !== 'succeeded' ||
    done.attempts.length !== 2 ||
    done.attempts[0]!.end_reason !== 'provider_offline' ||
    second?.provider_id === first.provider_id ||
    second?.end_reason !== 'workload_exited' ||
    logs.code !== 0
  ) {
    throw new Error(`the job did not survive the loss of its machine: ${JSON.stringify(done)}`);
  }
  // Where the second attempt began: its own log, in the renter's storage.
  const log = await (await objects.download({ key: `sessions/${second.session_id}/logs/stdout.log` })).text();
  const from = Number(/^from (\d+)$/m.exec(log)?.[1]);
  if (!(from >= saved)) throw new Error(`the second attempt counted from ${from}, the checkpoint held ${saved}`);
  const shown = await gpu(renter, ['jobs', 'show', jobId]).exited;
  say('the job succeeded on the other machine, from its last checkpoint', '', standsFor('showJob', { job: jobId }));
  shows(shown.stdout);

  // The money: the attempts' costs are what the job spent, and what the wallet paid; nothing else is held.
  const after = await balance();
  const costs = done.attempts.reduce((sum, a) => sum.add(a.cost ?? '0'), new Decimal(0));
  const paid = new Decimal(before.available).minus(after.available);
  if (!costs.eq(done.spent) || !paid.eq(done.spent) || !new Decimal(after.locked).eq(before.locked)) {
    throw new Error(
      `the job spent ${done.spent}, its attempts cost ${costs.toFixed()}, the wallet paid ${paid.toFixed()} ` +
        `(locked ${before.locked} before, ${after.locked} after)`,
    );
  }
  say(
    'the renter paid both attempts and nothing more',
    `${done.attempts.map((a) => a.cost).join(' + ')} = ${done.spent} tokens, the wallet's available down by as much`,
    standsFor('walletHistory', { wallet: renter.wallet.id }),
  );
  return { job: done, saved, from };
}

async function main() {
  await platform();
  await checkDataFolder();
  const connection = new Connection(urls.rpc, 'finalized');

  // 1. The provider, its daemon and its machine.
  const provider = await signUp('provider');
  await verifyAddress(provider);
  const providerAuth = authClient({ baseUrl: urls.auth, token: provider.token });
  const daemonClient = unwrap(
    await providerAuth.POST('/api/v1/auth/clients', {
      body: { name: `demo-rig-${randomBytes(3).toString('hex')}`, role: 'daemon' },
    }),
  );
  made.clients.push({ id: daemonClient.client.id, token: provider.token });
  say(
    'daemon client created',
    daemonClient.client.id,
    standsFor('daemonClient', { gateway: urls.gateway, name: daemonClient.client.name }),
  );
  const stateFile = path.join(work, 'daemon-state.json');
  const h100 = {
    name: 'NVIDIA H100 80GB HBM3',
    memory_total_mib: 81559,
    power_limit_w: 700,
    utilization_gpu: 97,
    utilization_memory: 61,
    temperature: 64,
    power_draw_w: 655,
  };
  const daemonConfig = {
    log_level: 'warn',
    platform_url: urls.gateway,
    credentials: { client_id: daemonClient.client.id, client_secret: daemonClient.client_secret },
    state_file: stateFile,
    provider: { name: 'demo-rig', hostname: 'demo-rig.local', location: 'demo' },
    heartbeat_interval: '2s',
    gpu: { source: 'simulated', simulated_gpus: Array.from({ length: 8 }, () => h100) },
    // Renters' workloads run in the sandbox here (the demo's folder lets their users through to it, as /var/lib would).
    // Each workload's disk is reserved on this machine's disk in full while it runs: the demo's need little.
    workloads: { run_dir: path.join(work, 'workloads'), stop_grace: '2s', disk_mb: 1024, disk_files: 65_536 },
  };
  chmodSync(work, 0o711);
  ensureSandbox();
  const configFile = path.join(work, 'daemon.yaml');
  writeFileSync(configFile, JSON.stringify(daemonConfig, null, 2), { mode: 0o600 });
  let daemon = spawnDaemon(configFile);
  const machineId = await registeredBy(daemon, stateFile, 'the daemon');
  made.machines.push({ id: machineId, name: 'demo-rig', token: provider.token });
  const registry = registryClient({ baseUrl: urls.registry, token: provider.token });
  const machineNow = async () =>
    unwrap(await registry.GET('/providers/{providerID}', { params: { path: { providerID: machineId } } }));
  const machine = await machineNow();
  say(
    'machine registered by the daemon',
    `${machineId}: ${machine.gpus.length} × ${machine.gpus[0]?.model_name}`,
    standsFor('runDaemon', { config: 'daemon.yaml' }),
  );

  const providerBilling = billingClient({ baseUrl: urls.billing, token: provider.token });
  // The provider's rates for a machine of its: 200 tokens per H100-hour, the platform's VRAM and power rates.
  const setRates = async (providerID: string, bidFloor: string | null = null) =>
    unwrap(
      await providerBilling.PUT('/api/v1/provider/{providerID}/rates', {
        params: { path: { providerID } },
        body: {
          base_rates: { 'nvidia-tesla-h100': '200' },
          vram_rate_per_gb_hour: null,
          power_rate_per_watt_hour: null,
          bid_floor: bidFloor,
        },
      }),
    );
  await setRates(machineId);
  const payoutKey = Keypair.generate();
  const payoutSetting = unwrap(
    await providerBilling.PUT('/api/v1/provider/{providerID}/payout-settings', {
      params: { path: { providerID: machineId } },
      body: { auto_payout: true, destination: payoutKey.publicKey.toBase58() },
    }),
  );
  say(
    'provider rates and automatic payouts set',
    `200 tokens per GPU-hour; earnings over ${payoutSetting.minimum_payout} paid to ${payoutSetting.destination}`,
    standsFor('setRates', { gateway: urls.gateway, machine: machineId, address: payoutKey.publicKey.toBase58() }),
  );

  // 2. The renter, tokens on chain, a wallet and a deposit.
  const { treasury_token_account: treasury, decimals } = unwrap(
    await billingClient({ baseUrl: urls.billing }).GET('/api/v1/deposits/instructions'),
  );
  const treasuryBefore = await tokenAccountBalance(connection, treasury);
  const renter = await fundedRenter(connection, 'renter', 1000, '900');
  const billing = renter.billing;

  // 3. The market: discovery, the dataset, quote, start; a second renter, a third refused; usage, a cap, the output.
  const quote = unwrap(
    await billing.POST('/api/v1/pricing/calculate', {
      body: { gpu_model: 'H100', gpu_count: 4, provider_id: machineId },
    }),
  );
  // The market's price is billing's: the offer says per GPU-hour what the quote says for 4 of the machine's GPUs.
  const offer = await findOffer(renter.token, machineId, (price) =>
    new Decimal(price).mul(quote.gpu_count).eq(quote.total_hourly_rate),
  );
  say(
    'renter found the machine on the market with its own token',
    `${offer.free_gpus} free ${offer.gpu_model} at ${offer.price_per_gpu_hour} tokens per GPU-hour, reliability ${offer.reliability.score}`,
    standsFor('findOffer', { gpus: '4' }),
  );
  const objects = objectStore({ baseUrl: urls.storage, token: renter.token });
  const runId = randomBytes(4).toString('hex');
  // A key with a folder in the renter's part of the default bucket (kept under users/<renter>/ there).
  const datasetKey = `datasets/run-${runId}.csv`;
  const dataset = `step,loss\n${Array.from({ length: 1000 }, (_, i) => `${i},${(1 / (i + 1)).toFixed(6)}`).join('\n')}\n`;
  await objects.upload({ key: datasetKey }, dataset, { contentType: 'text/csv' });
  made.folders.push({ email: renter.email, id: renter.id });
  say(
    'renter uploaded a dataset',
    `${datasetKey} (${dataset.length} bytes)`,
    standsFor('upload', { file: 'data.csv', key: datasetKey }),
  );
  say(
    "quote for 4 of the machine's GPUs",
    `${quote.total_hourly_rate} tokens/hour (${quote.rate_key}, ${quote.gpu_count} GPUs): ${quote.gpu_count} × the offer's price`,
    standsFor('quote', { machine: machineId, gpus: '4' }),
  );
  const startOn = (who: Pick<Renter, 'id' | 'billing' | 'wallet'>, jobId: string, extra: { spend_cap?: string } = {}) =>
    who.billing.POST('/api/v1/billing/start-session', {
      params: { header: { 'idempotency-key': `demo-start-${jobId}` } },
      body: {
        user_id: who.id,
        wallet_id: who.wallet.id,
        provider_id: machineId,
        job_id: jobId,
        gpu_model: 'H100',
        gpu_count: 4,
        requested_vram_mb: 0,
        estimated_power_w: 0,
        accepted_hourly_rate: quote.total_hourly_rate,
        ...extra,
      },
    });
  const jobId = randomUUID();
  const start = unwrap(await startOn(renter, jobId));
  const sessionId = start.session.id;
  say(
    'session started',
    `${sessionId}: GPUs ${start.session.gpu_indices?.join(', ')} of the machine, ${start.hold_amount} tokens held`,
    standsFor('rent', { machine: machineId, gpus: '4', wallet: renter.wallet.id, rate: quote.total_hourly_rate }),
  );
  await until('the market to show the other 4 GPUs free', async () => {
    const m = await machineNow();
    const free = await findOffer(renter.token, machineId, () => true);
    return m.status === 'idle' && free.free_gpus === 4 ? true : undefined;
  });
  say('registry', 'the machine stays idle, on the market with its 4 other GPUs', standsFor('findOffer', { gpus: '4' }));

  // A second renter rents those 4 with a spend cap of its own; nothing is left for a third.
  const second = await fundedRenter(connection, 'second renter', 60, '50');
  const secondOffer = await findOffer(second.token, machineId, () => true);
  // A cap pays for at least the first minute (13.4 tokens at the 4 GPUs' 803.7/h): 15 buys 67 s.
  const cap = '15.000000';
  const capped = unwrap(await startOn(second, randomUUID(), { spend_cap: cap }));
  say(
    'second renter found the other 4 GPUs with its own token and rented them, capped',
    `${secondOffer.free_gpus} free; session ${capped.session.id} on GPUs ${capped.session.gpu_indices?.join(', ')}, at most ${cap} tokens`,
    standsFor('rentCapped', { machine: machineId, gpus: '4', wallet: second.wallet.id, cap }),
  );
  await until('the registry to show the machine busy', async () =>
    (await machineNow()).status === 'busy' ? true : undefined,
  );
  say('registry', 'every GPU rented: the machine is busy', standsFor('machines'));
  const third = await signUp('renter', 'third renter');
  const thirdBilling = billingClient({ baseUrl: urls.billing, token: third.token });
  const thirdWallet = unwrap(
    await thirdBilling.POST('/api/v1/wallet', {
      body: { owner_type: 'user', owner_id: third.id, solana_address: Keypair.generate().publicKey.toBase58() },
    }),
  );
  const refused = await startOn({ id: third.id, billing: thirdBilling, wallet: thirdWallet }, randomUUID());
  const problem = refused.error as { code?: string } | undefined;
  if (refused.response.status !== 409 || problem?.code !== 'PROVIDER_NOT_AVAILABLE') {
    throw new Error(`a third renter of the full machine got ${refused.response.status} ${problem?.code}`);
  }
  say(
    'third renter refused',
    `409 ${problem.code}: no 4 GPUs free on the machine`,
    standsFor('rent', { machine: machineId, gpus: '4', wallet: thirdWallet.id, rate: quote.total_hourly_rate }),
  );

  // The renter hands the job presigned URLs: GET for the dataset, PUT for the output (keys of the renter's in the
  // default bucket, kept under users/<renter>/).
  const presign = async (key: string, method: 'GET' | 'PUT') =>
    (await objects.presign({ key }, { method, expiry: '15m' })).url;
  const outputKey = `jobs/${jobId}/output.txt`;
  const presigned = { url: await presign(outputKey, 'PUT') };
  const input = await fetch(await presign(datasetKey, 'GET'));
  const inputBytes = Buffer.from(await input.arrayBuffer());
  if (input.status !== 200 || inputBytes.toString() !== dataset) throw new Error(`the job read ${input.status}`);
  const outputFile = path.join(work, 'output.txt');
  const digest = createHash('sha256').update(inputBytes).digest('hex');
  const output = `job ${jobId} on ${machineId}: read ${inputBytes.length} bytes (sha256 ${digest}), final loss 0.001000\n`;
  writeFileSync(outputFile, output);
  const uploaded = await uploadFile(outputFile, presigned.url, { contentType: 'text/plain' });
  const readText = await (await objects.download({ key: outputKey })).text();
  if (readText !== output) throw new Error(`the job's output read back: ${readText.slice(0, 200)}`);
  say(
    "job read the dataset; its output uploaded with the daemon's uploader through a presigned URL, read back",
    `${outputKey} (${uploaded.bytes} bytes)`,
    standsFor('presignedTransfer', { file: 'output.txt', key: outputKey }),
  );
  const usage = await until(
    'a usage report from the daemon',
    async () => {
      const u = await sessionOf(renter, sessionId);
      return u.last_usage_at ? u : undefined;
    },
    60_000,
  );
  say(
    'usage reported by the daemon',
    `power ${usage.actual_power_w} W of its 4 GPUs, cost so far ${usage.cost_so_far}`,
    standsFor('sessions'),
  );

  // 4. The daemon killed mid-session and started again: it finds its machine and the session, and reports on.
  daemon.kill('SIGKILL');
  await new Promise((r) => (daemon.exitCode !== null ? r(null) : daemon.once('exit', r)));
  const killedAt = Date.now();
  say('daemon killed (SIGKILL) mid-session', `last usage at ${usage.last_usage_at}`, standsFor('killDaemon'));
  await sleep(3000);
  daemon = spawnDaemon(configFile);
  // Billing applies one report per session and minute of the clock: the restarted daemon's first to count is the next
  // minute's, up to a minute away, and a loaded machine restarts it slowly (usageResumeTimeoutMs).
  const resumed = await until(
    'usage reports from the restarted daemon',
    async () => {
      if (daemon.exitCode !== null) throw new Error('the restarted provider daemon exited');
      const u = await sessionOf(renter, sessionId);
      return u.last_usage_at && Date.parse(u.last_usage_at) > killedAt ? u : undefined;
    },
    usageResumeTimeoutMs(killedAt),
  );
  say(
    'daemon restarted: same machine, the running session found, usage resumed',
    `usage at ${resumed.last_usage_at}`,
    standsFor('restartDaemon', { config: 'daemon.yaml' }),
  );

  // The capped session ends at its cap once the time it pays for is over, its GPUs back on the market.
  const cappedEnd = await until(
    'the capped session to end at its cap',
    async () => {
      const s = await sessionOf(second, capped.session.id);
      return s.status === 'completed' ? s : undefined;
    },
    120_000,
  );
  if (cappedEnd.end_reason !== 'spend_cap' || cappedEnd.cost_so_far !== cap) {
    throw new Error(`the capped session ended ${cappedEnd.end_reason} at ${cappedEnd.cost_so_far}`);
  }
  const secondRecord = unwrap(
    await second.billing.GET('/api/v1/billing/history', { params: { query: { user_id: second.id } } }),
  ).find((r) => r.session_id === capped.session.id);
  if (!secondRecord) throw new Error("the capped session's billing record is missing");
  say(
    'second session ended at its spend cap',
    `${secondRecord.total_cost} tokens for ${secondRecord.billed_minutes} started minute(s) (power ${cappedEnd.actual_power_w} W of its 4 GPUs)`,
    standsFor('sessionEnded'),
  );
  await until('the registry to show the machine idle', async () =>
    (await machineNow()).status === 'idle' ? true : undefined,
  );
  say('registry', "the capped session's 4 GPUs are back on the market", standsFor('findOffer', { gpus: '4' }));

  // 5. End, earnings, payouts on chain, idle.
  const ended = unwrap(await billing.POST('/api/v1/billing/end-session', { body: { session_id: sessionId } }));
  const record = ended.billing_record;
  say(
    'session ended',
    `${record.billed_minutes} started minute(s) billed (the billing minute is not shortened), ${record.total_cost} ` +
      `tokens: ${record.provider_earnings} to the provider, ${record.platform_fee} platform fee`,
    standsFor('end', { session: sessionId }),
  );
  // 6. Workloads: a renter's job runs on exactly the GPUs it leased, billed only while it runs.
  const jobs = await workloadScene(renter, machineId, datasetKey, dataset);
  // 7. Reach: an idle workload, commands run in it and a server in it read through the gateway, cut at its end.
  const reached = await reachScene(renter, machineId);
  // 8. Interruptible: a job at a bid, raised, taken back with notice by an on-demand rental.
  const spot = await spotScene(renter, second, machineId, () => setRates(machineId, '50'));
  const records = [
    record,
    secondRecord,
    jobs.record,
    jobs.cappedRecord,
    reached.record,
    spot.record,
    spot.winnerRecord,
  ];
  const earned = records.reduce((sum, r) => sum.add(r.provider_earnings), new Decimal(0));
  // Automatic payouts run at a session's end and every reconcile interval (30 s under pnpm start), then wait for the
  // chain: what billing reports (the earnings left, each payout and its status, a failure it will retry) moves at each
  // step, and the wait lasts while it does (a minute of nothing is three intervals, however loaded the machine). It
  // ends once no payout is under way or due (payoutsSettled), whatever they add up to: the reconciliation below
  // compares the payouts with the earnings, so that one too many or too large is a FAIL line, not an endless wait.
  const payouts = await untilProgress(
    "the automatic payouts of every session's earnings",
    async () => {
      const list = unwrap(
        await providerBilling.GET('/api/v1/wallet/{walletID}/transactions', {
          params: { path: { walletID: payoutSetting.wallet_id }, query: { type: ['payout'] } },
        }),
      );
      const setting = unwrap(
        await providerBilling.GET('/api/v1/provider/{providerID}/payout-settings', {
          params: { path: { providerID: machineId } },
        }),
      );
      const earnings = unwrap(
        await providerBilling.GET('/api/v1/provider/{providerID}/earnings', {
          params: { path: { providerID: machineId } },
        }),
      );
      const paid = list.filter((t) => t.status === 'confirmed');
      const state = JSON.stringify({
        earned: earned.toFixed(),
        earnings: earnings,
        payouts: list.map((t) => `${t.amount} ${t.status}`),
        last_failure: setting.last_failure,
        next_attempt_at: setting.next_attempt_at,
      });
      return { done: payoutsSettled({ decimals, earnings, payouts: list }) ? paid : undefined, state };
    },
    60_000,
    300_000,
  );
  const onChain = await chainBalance(connection, payoutKey.publicKey);
  say(
    'paid out on chain',
    `${payouts
      .map(
        (p) =>
          `${p.amount}${new Decimal(p.fee).isZero() ? '' : `, ${p.fee} of it the token account fee`} (signature ${p.signature})`,
      )
      .join('; ')}; the address now holds ${onChain}`,
    standsFor('earnings', { machine: machineId }),
  );
  await until('the registry to show the machine idle', async () =>
    (await machineNow()).status === 'idle' ? true : undefined,
  );
  say('registry', 'the machine is idle again', standsFor('machines'));

  // 9. Reconciliation, read back from billing and the chain.
  const checks = reconcile({
    decimals,
    sessions: records.map((r) => ({
      totalCost: r.total_cost,
      providerEarnings: r.provider_earnings,
      platformFee: r.platform_fee,
      platformFeePercent: start.session.rates.platform_fee_percent,
    })),
    renters: [
      await renterFigures(connection, renter, [
        record.total_cost,
        jobs.record.total_cost,
        jobs.cappedRecord.total_cost,
        reached.record.total_cost,
        spot.record.total_cost,
      ]),
      await renterFigures(connection, second, [secondRecord.total_cost, spot.winnerRecord.total_cost]),
    ],
    payouts: payouts.map((p) => p.amount),
    payoutFees: payouts.map((p) => p.fee),
    payoutAddressOnChain: onChain,
    treasuryBefore,
    treasuryAfter: await tokenAccountBalance(connection, treasury),
  });
  process.stdout.write('[demo] reconciliation, read back from billing and the chain:\n');
  for (const c of checks) process.stdout.write(`  ${c.ok ? 'ok  ' : 'FAIL'} ${c.line}\n`);
  if (!checks.every((c) => c.ok)) throw new Error('the market does not reconcile (FAIL lines above)');
  const balance = unwrap(
    await billing.GET('/api/v1/wallet/{walletID}/balance', { params: { path: { walletID: renter.wallet.id } } }),
  );

  // 10. Jobs: a second machine of the provider's; a job survives the loss of the machine it runs on.
  const secondDaemonClient = unwrap(
    await providerAuth.POST('/api/v1/auth/clients', {
      body: { name: `demo-rig-2-${randomBytes(3).toString('hex')}`, role: 'daemon' },
    }),
  );
  made.clients.push({ id: secondDaemonClient.client.id, token: provider.token });
  const secondStateFile = path.join(work, 'daemon-2-state.json');
  const secondConfigFile = path.join(work, 'daemon-2.yaml');
  writeFileSync(
    secondConfigFile,
    JSON.stringify({
      ...daemonConfig,
      credentials: { client_id: secondDaemonClient.client.id, client_secret: secondDaemonClient.client_secret },
      state_file: secondStateFile,
      provider: { name: 'demo-rig-2', hostname: 'demo-rig-2.local', location: 'demo' },
      workloads: { ...daemonConfig.workloads, run_dir: path.join(work, 'workloads-2') },
    }),
    { mode: 0o600 },
  );
  const secondDaemon = spawnDaemon(secondConfigFile);
  const secondMachineId = await registeredBy(secondDaemon, secondStateFile, 'the second daemon');
  made.machines.push({ id: secondMachineId, name: 'demo-rig-2', token: provider.token });
  await setRates(secondMachineId);
  say(
    'the provider brings a second machine',
    `${secondMachineId}: 8 × H100 at the same rates`,
    standsFor('runDaemon', { config: 'daemon-2.yaml' }),
  );
  const jobbed = await jobScene(
    renter,
    new Map([
      [machineId, daemon],
      [secondMachineId, secondDaemon],
    ]),
  );

  return {
    provider_id: machineId,
    session_id: sessionId,
    capped_session_id: capped.session.id,
    billed_minutes: record.billed_minutes,
    total_cost: record.total_cost,
    provider_earnings: record.provider_earnings,
    platform_fee: record.platform_fee,
    capped_total_cost: secondRecord.total_cost,
    workload_session_id: jobs.record.session_id,
    workload_billed_minutes: jobs.record.billed_minutes,
    workload_total_cost: jobs.record.total_cost,
    workload_hourly_rate: jobs.record.total_hourly_rate,
    workload_output_key: jobs.outputKey,
    capped_workload_total_cost: jobs.cappedRecord.total_cost,
    reach_session_id: reached.record.session_id,
    reach_billed_minutes: reached.record.billed_minutes,
    reach_total_cost: reached.record.total_cost,
    reach_hourly_rate: reached.record.total_hourly_rate,
    reach_bytes_in: reached.reach.bytes_in,
    reach_bytes_out: reached.reach.bytes_out,
    spot_session_id: spot.record.session_id,
    spot_end_reason: spot.record.end_reason,
    spot_total_cost: spot.record.total_cost,
    spot_winner_total_cost: spot.winnerRecord.total_cost,
    spot_winner_hourly_rate: spot.winnerRecord.total_hourly_rate,
    payout_amounts: payouts.map((p) => p.amount),
    payout_fees: payouts.map((p) => p.fee),
    payout_signatures: payouts.map((p) => p.signature),
    payout_address: payoutKey.publicKey.toBase58(),
    payout_address_balance: onChain,
    renter_available: balance.available,
    dataset_key: datasetKey,
    output_key: outputKey,
    reconciled: checks.length,
    job_id: jobbed.job.id,
    job_state: jobbed.job.state,
    job_attempts: jobbed.job.attempts.length,
    job_lost_reason: jobbed.job.attempts[0]?.end_reason,
    job_checkpoint_count: jobbed.saved,
    job_resumed_from: jobbed.from,
    job_spent: jobbed.job.spent,
  };
}

/**
 * Stops what the demo started (the daemons, `gpu` runs), and the platform last when it started it: `platform`. Each
 * is asked with SIGTERM (a daemon stops its workloads), and killed with its process group (what it started, a
 * workload's sandbox) if it still runs 20 s later.
 */
async function stopChildren(which: 'all' | 'but the platform') {
  for (const child of [...children].reverse()) {
    if (which !== 'all' && child === platformChild) continue;
    if (child.exitCode !== null || child.signalCode !== null) continue;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGTERM');
    await Promise.race([exited, sleep(20_000)]);
    if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) continue;
    try {
      process.kill(-child.pid, 'SIGKILL');
    } catch {
      child.kill('SIGKILL');
    }
  }
}

/** Takes down the demo's own folder (in the system's temporary folder, not the data folder). */
function removeWork() {
  // The daemon killed for good in the jobs scene left its workloads' filesystems mounted (its next start would take
  // them down): taken down here, so that nothing is removed through them.
  for (const line of readFileSync('/proc/self/mounts', 'utf8').split('\n')) {
    const at = line.split(' ')[1];
    if (at?.startsWith(`${work}/`)) spawnSync('umount', ['-l', at]);
  }
  rmSync(work, { recursive: true, force: true });
}

/**
 * At the end, with its daemons stopped: takes off the platform what the demo made that would stay in everyone's way
 * (its machines, on the market, and their daemons' credentials), and names what stays in the data folder (the
 * accounts, with their wallets and the money's history, which a ledger keeps, the mail sent to them, the renter's
 * objects: no one but the demo knows their passwords). What could not be taken away is named with why.
 */
async function tidyUp(): Promise<string[]> {
  const kept: string[] = [];
  const attempt = async (what: string, act: () => Promise<unknown>) => {
    try {
      await act();
      return true;
    } catch (err) {
      kept.push(`${what} (${(err as Error).message})`);
      return false;
    }
  };
  const machines: string[] = [];
  for (const m of made.machines) {
    const registry = registryClient({ baseUrl: urls.registry, token: m.token });
    const removed = await attempt(`the machine ${m.name} (${m.id})`, async () =>
      unwrap(await registry.DELETE('/providers/{providerID}', { params: { path: { providerID: m.id } } })),
    );
    if (removed) machines.push(`${m.name} (${m.id})`);
  }
  let credentials = 0;
  for (const c of made.clients) {
    const auth = authClient({ baseUrl: urls.auth, token: c.token });
    const revoked = await attempt(`the daemon credentials ${c.id}`, async () =>
      unwrap(await auth.DELETE('/api/v1/auth/clients/{id}', { params: { path: { id: c.id } } })),
    );
    if (revoked) credentials += 1;
  }
  if (made.accounts.length === 0) return [];
  const done = [
    ...(machines.length > 0 ? [`the machines ${machines.join(' and ')} taken off the market`] : []),
    ...(credentials > 0 ? [`${credentials} daemon credentials revoked`] : []),
  ];
  const folders = made.folders.map((f) => `${f.email}'s under users/${f.id}/`);
  const lines = [
    ...(done.length > 0 ? [`[demo] tidied up: ${done.join(', ')}`] : []),
    `[demo] left in the data folder ${data}: the accounts ${made.accounts.join(', ')} (no one can sign in as them: ` +
      "their passwords were the demo's alone), their wallets and the money's history at billing (a ledger keeps " +
      `every entry), the mail sent to them in ${path.join(data, 'mail')} (pnpm mail --to <address>)` +
      `${folders.length > 0 ? `, and the objects in storage of ${folders.join(', ')} in the platform's bucket (the dataset, the jobs' logs, outputs and checkpoints)` : ''}`,
  ];
  if (kept.length > 0) lines.push(`[demo] could not take away: ${kept.join('; ')}`);
  return lines;
}

/**
 * The demo's end, whichever way it comes: its children stopped (the platform last, after the tidy-up it serves), its
 * folder removed, what it made tidied up, its last lines, and `process.exit(code)`. Run once: a signal during it (a
 * second Ctrl-C, pnpm passing one on) changes nothing, and the scenes, still running until the exit, start nothing
 * more (`spawnProgram`).
 */
let finishing: Promise<never> | undefined;
function finish(code: number, summary?: Awaited<ReturnType<typeof main>>): Promise<never> {
  finishing ??= (async () => {
    await stopChildren('but the platform');
    removeWork();
    const tidied = await tidyUp();
    // The platform, when the demo started it, stops before the last lines, which stay the demo's.
    await stopChildren('all');
    for (const line of tidied) process.stdout.write(`${line}\n`);
    if (summary) process.stdout.write(`DEMO OK ${JSON.stringify(summary)}\n`);
    process.exit(code);
  })();
  return finishing;
}

// Ctrl-C (SIGINT) or SIGTERM: the same clean-up as at the end, then the shell's exit status for the signal (128 + its
// number). Without it the daemons' configurations (their secrets) stayed in the temporary folder, their credentials
// live and the machines on the market.
for (const [signal, code] of [
  ['SIGINT', 130],
  ['SIGTERM', 143],
] as const) {
  process.on(signal, () => {
    if (!finishing) process.stderr.write(`[demo] ${signal}: stopping, and tidying up what it made\n`);
    void finish(code);
  });
}

say(
  'pnpm demo',
  `about ${DEMO_MINUTES} minutes; under each step, the command it stands for ($ pnpm gpu ... is the gpu command line)`,
);
let failed = false;
let summary: Awaited<ReturnType<typeof main>> | undefined;
try {
  summary = await main();
} catch (err) {
  failed = true;
  // A scene cut short by the clean-up of a signal fails for that reason alone: nothing to report.
  if (!finishing) process.stderr.write(`[demo] FAILED: ${(err as Error).message}\n`);
}
await finish(failed ? 1 : 0, summary);
