/**
 * A newcomer's accounts with `gpu` alone, run as a person runs it (a child process) against the real auth service,
 * registry and billing behind the real gateway: the platform found where `pnpm start` puts it (its variables, the file
 * in its data folder) and named when it cannot be reached; wallets listed, opened from a keypair (its address proven)
 * and chosen as the default that `rent` and `jobs submit` pay with; `pnpm wallet` as `gpu wallet` (an API key, a
 * sign-in for one command that leaves none behind, an address of no wallet refused); a provider's machine registered
 * and its daemon's credentials written, which the daemon attaches to that machine with.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { clientCredentials } from '@gpu/client';
import { createLogger } from '@gpu/common';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { registerAndLogin } from '../../../services/auth/test/helpers.ts';
import type { BillingHarness } from '../../../services/billing/test/support/setup.ts';
import { useAuthAndRegistry } from '../../../tests/support/auth-and-registry.ts';
import { billingWithRegistry } from '../../../tests/support/billing-with-registry.ts';
import { buildGateway } from '../../gateway/src/gateway.ts';
import { loadDaemonConfig } from '../../provider-daemon/src/config.ts';
import { loadCredentials } from '../../provider-daemon/src/credentials.ts';
import { ProviderDaemon } from '../../provider-daemon/src/daemon.ts';
import { gpuSource } from '../../provider-daemon/src/gpu/source.ts';
import { CLI_TEST_MS, type Gpu, type GpuResult, gpuAt, root } from './support/gpu.ts';

vi.setConfig({ testTimeout: CLI_TEST_MS });

const platform = useAuthAndRegistry();
const dir = mkdtempSync(join(tmpdir(), 'gpu-accounts-'));
let billing: BillingHarness;
let gateway: Awaited<ReturnType<typeof buildGateway>> | undefined;
let url = '';
/** A port where nothing listens (the gateway's, once it has closed: the tests' ports are their own). */
let nowhere = 0;

beforeAll(async () => {
  billing = await billingWithRegistry(platform);
  const billingUrl = await billing.app.listen({ host: '127.0.0.1', port: 0 });
  const upstreams = {
    auth: platform.authUrl,
    // No storage here: nothing of these tests reaches it.
    storage: 'http://127.0.0.1:9',
    'provider-registry': platform.registryUrl,
    billing: billingUrl,
  };
  const closed = await buildGateway({ upstreams, logLevel: 'silent' });
  nowhere = Number(new URL(await closed.listen({ host: '127.0.0.1', port: 0 })).port);
  await closed.close();
  gateway = await buildGateway({ upstreams, logLevel: 'silent' });
  url = await gateway.listen({ host: '127.0.0.1', port: 0 });
});

afterAll(async () => {
  await gateway?.close();
  await billing?.close();
  rmSync(dir, { recursive: true, force: true });
});

interface User {
  id: string;
  email: string;
  password: string;
  gpu: Gpu;
  config: string;
}

/** A new user of the real auth, signed in with `gpu login` in a configuration folder of their own. */
async function signedIn(roles: string[]): Promise<User> {
  const { user, email, password } = await registerAndLogin(platform.auth.app, { roles });
  const config = join(dir, user.id);
  const gpu = gpuAt(url, config);
  const login = await gpu(['login', '--email', email], { input: `${password}\n` });
  expect(login, login.stderr).toMatchObject({ code: 0 });
  return { id: user.id, email, password, gpu, config };
}

/** What a run that succeeded printed, as JSON. */
function answer(r: GpuResult) {
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout);
}

/** `pnpm wallet ...` from the checkout with `env` (none of the runner's GPU_, platform or gateway settings). */
async function pnpmWallet(args: string[], env: Record<string, string>) {
  const clean = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !/^(GPU_|PLATFORM_|GATEWAY_URL|SOLANA_RPC_URL)/.test(k)),
  );
  return promisify(execFile)('pnpm', ['--silent', 'wallet', ...args], {
    cwd: root,
    env: { ...clean, PLATFORM_DATA_DIR: join(dir, 'no-platform'), ...env },
    timeout: 60_000,
  }).then(
    (r) => ({ code: 0, ...r }),
    (e: { code: number; stdout: string; stderr: string }) => e,
  );
}

/** A new Solana keypair file, made by `pnpm wallet new`; its address. */
async function newKeypair(name: string): Promise<{ file: string; address: string }> {
  const file = join(dir, `${name}-${Math.random()}.json`);
  const made = await pnpmWallet(['new', '--keypair', file], {});
  expect(made.code, made.stderr).toBe(0);
  return { file, address: JSON.parse(made.stdout).address };
}

describe('a newcomer signs up with gpu', () => {
  it('makes the account and signs in, saving no password; a taken address or a short password is one line', async () => {
    const config = join(dir, 'newcomer');
    const gpu = gpuAt(url, config);
    const email = `newcomer-${Math.random().toString(36).slice(2)}@example.com`;
    const password = 'a long newcomer passphrase';
    const made = await gpu(['signup', '--email', email, '--role', 'renter', '--role', 'provider', '--json'], {
      input: `${password}\n`,
    });
    const user = answer(made);
    expect(user).toMatchObject({ email });
    expect([...user.roles].sort()).toEqual(['provider', 'renter']);
    const saved = readFileSync(join(config, 'config.json'), 'utf8');
    expect(saved).not.toContain(password);
    expect(JSON.parse(saved)).toMatchObject({ email, refresh_token: expect.any(String) });
    expect(answer(await gpu(['whoami', '--json']))).toMatchObject({ id: user.id, email });

    const taken = await gpuAt(url, join(dir, 'second'))(['signup', '--email', email], { input: `${password}\n` });
    expect(taken.code).toBe(1);
    expect(taken.stderr).toMatch(/^gpu: EMAIL_TAKEN: [^\n]+\n$/);
    const short = await gpuAt(url, join(dir, 'third'))(['signup', '--email', `x${email}`], { input: 'short\n' });
    expect(short).toMatchObject({ code: 1, stderr: expect.stringMatching(/^gpu: PASSWORD_TOO_SHORT: /) });
  });
});

describe('gpu finds the platform', () => {
  it('where PLATFORM_PORT_BASE/PLATFORM_HOST or the file of pnpm start put it, in that order, and names the URL it could not reach', async () => {
    const user = await signedIn(['renter']);
    const gatewayPort = Number(new URL(url).port);
    const dataDir = mkdtempSync(join(dir, 'data-'));
    const fresh = gpuAt('', join(dir, 'fresh'));
    /** `gpu --json whoami` with a key, nothing saved, no GPU_URL: where does it go? */
    const whoami = (env: Record<string, string>) =>
      fresh(['whoami', '--json'], {
        env: { GPU_URL: '', PLATFORM_PORT_BASE: '', PLATFORM_HOST: '', PLATFORM_DATA_DIR: dataDir, ...env },
      });
    const key = answer(await user.gpu(['keys', 'create', 'where', '--scope', 'read', '--json'])).api_key as string;

    // pnpm start's variables: its gateway is at PLATFORM_PORT_BASE+10 on PLATFORM_HOST.
    const byBase = await whoami({ GPU_API_KEY: key, PLATFORM_PORT_BASE: String(gatewayPort - 10) });
    expect(answer(byBase)).toMatchObject({ id: user.id });
    expect(
      answer(
        await whoami({ GPU_API_KEY: key, PLATFORM_PORT_BASE: String(gatewayPort - 10), PLATFORM_HOST: '0.0.0.0' }),
      ),
    ).toMatchObject({ id: user.id });

    // The file a running pnpm start writes into its data folder.
    writeFileSync(join(dataDir, 'platform.json'), JSON.stringify({ gateway: url, solana_rpc: 'http://127.0.0.1:9' }));
    expect(answer(await whoami({ GPU_API_KEY: key }))).toMatchObject({ id: user.id });

    // The variables come before the file, and the failure names the URL and what named it.
    const wrongBase = await whoami({ GPU_API_KEY: key, PLATFORM_PORT_BASE: String(nowhere - 10) });
    expect(wrongBase.code).toBe(1);
    expect(JSON.parse(wrongBase.stderr)).toEqual({
      status: null,
      code: 'UNREACHABLE',
      detail: `cannot reach the platform at http://127.0.0.1:${nowhere} (from PLATFORM_PORT_BASE and PLATFORM_HOST): ECONNREFUSED`,
    });
    // GPU_URL and --url come before them all.
    const byUrl = await whoami({ GPU_API_KEY: key, PLATFORM_PORT_BASE: String(nowhere - 10), GPU_URL: url });
    expect(answer(byUrl)).toMatchObject({ id: user.id });
    const flag = await fresh(['whoami', '--url', `http://127.0.0.1:${nowhere}`], { env: { GPU_API_KEY: key } });
    expect(flag.stderr).toBe(
      `gpu: cannot reach the platform at http://127.0.0.1:${nowhere} (given with --url): ECONNREFUSED\n`,
    );

    // A sign-in saved its URL: it comes before the variables and the file.
    const saved = gpuAt(url, user.config);
    const signedInThere = await saved(['whoami', '--json'], {
      env: { GPU_URL: '', PLATFORM_PORT_BASE: String(nowhere - 10), PLATFORM_DATA_DIR: dataDir },
    });
    expect(answer(signedInThere)).toMatchObject({ id: user.id });

    // A setting pnpm start would refuse is refused here too, in one line.
    const bad = await whoami({ GPU_API_KEY: key, PLATFORM_PORT_BASE: 'eighty' });
    expect(bad.code).toBe(1);
    expect(JSON.parse(bad.stderr)).toMatchObject({ detail: 'PLATFORM_PORT_BASE must be a port number, got eighty' });
    const badText = await fresh(['whoami'], { env: { GPU_API_KEY: key, GPU_URL: '', PLATFORM_PORT_BASE: 'eighty' } });
    expect(badText).toMatchObject({ code: 1, stderr: 'gpu: PLATFORM_PORT_BASE must be a port number, got eighty\n' });
  });
});

describe('wallets with gpu', () => {
  it('opens your wallet from a keypair (proven), lists it as the default, and pays rent and jobs with it', async () => {
    const renter = await signedIn(['renter']);
    const owner = await signedIn(['provider']);
    expect(answer(await renter.gpu(['wallet', 'list', '--json']))).toEqual([]);

    // No wallet yet: rent says which is missing, and how to have one (a usage error, nothing started).
    const machine = answer(
      await owner.gpu([
        'provider',
        'machines',
        'add',
        'rig-rent',
        '--gpu',
        '2xNVIDIA H100 80GB HBM3:81559:580.65.06',
        '--json',
      ]),
    );
    const rentArgs = ['rent', '--machine', machine.id, '--gpu-model', 'H100', '--json'];
    const none = await renter.gpu(rentArgs);
    expect(none.code).toBe(2);
    // With --json, the failure too is JSON.
    expect(JSON.parse(none.stderr)).toMatchObject({
      code: 'USAGE_ERROR',
      detail: expect.stringMatching(/^which wallet\? none given and no default: gpu wallet list shows yours; /),
    });

    const mine = await newKeypair('renter');
    const opened = answer(await renter.gpu(['wallet', 'open', '--keypair', mine.file, '--json']));
    expect(opened).toMatchObject({ owner_type: 'user', owner_id: renter.id, solana_address: mine.address });
    expect(opened.address_proven_at).not.toBeNull();
    expect(JSON.parse(readFileSync(join(renter.config, 'config.json'), 'utf8')).wallet).toBe(opened.id);
    // Again: the same wallet, nothing new; another address of the same user is refused, naming theirs.
    const again = await renter.gpu(['wallet', 'open', '--keypair', mine.file]);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toContain('already open');
    const other = await newKeypair('other');
    const second = await renter.gpu(['wallet', 'open', '--address', other.address]);
    expect(second.code).toBe(1);
    expect(second.stderr).toBe(
      `gpu: your wallet ${opened.id} is at ${mine.address}, not ${other.address}: a user has one wallet, and its address is where deposits come from\n`,
    );

    const listed = await renter.gpu(['wallet', 'list']);
    expect(listed.stdout).toMatch(new RegExp(`\\*\\s*│ ${opened.id} │ yours\\s*│ ${mine.address} │ yes`));
    // The default wallet stands in for the ID; an address of no wallet of theirs is refused, not answered with theirs.
    await billing.credit(opened.id, '100');
    expect(answer(await renter.gpu(['wallet', 'balance', '--json']))).toMatchObject({
      wallet_id: opened.id,
      available: '100.000000',
    });
    const elsewhere = await renter.gpu(['wallet', 'balance', '--address', other.address]);
    expect(elsewhere).toMatchObject({ code: 1 });
    expect(elsewhere.stderr).toBe(
      `gpu: no wallet of yours is at ${other.address} (gpu wallet open --address ${other.address} opens yours there)\n`,
    );

    // rent without --wallet: paid from the default.
    const started = answer(await renter.gpu(rentArgs));
    expect(started.session).toMatchObject({ wallet_id: opened.id, provider_id: machine.id });
    expect((await renter.gpu(['end', started.session.id])).code).toBe(0);
    // jobs submit too.
    const job = answer(
      await renter.gpu([
        'jobs',
        'submit',
        '--max-price',
        '50',
        '--spend-cap',
        '5',
        '--wait-for-capacity',
        '--json',
        '--',
        'true',
      ]),
    );
    expect(job).toMatchObject({ wallet_id: opened.id });
    expect((await renter.gpu(['jobs', 'cancel', job.id])).code).toBe(0);

    // A wallet of someone else's is never made the default.
    const refused = await owner.gpu(['wallet', 'use', opened.id]);
    expect(refused).toMatchObject({ code: 1, stderr: expect.stringMatching(/^gpu: NOT_WALLET_HOLDER: /) });
    expect(JSON.parse(readFileSync(join(owner.config, 'config.json'), 'utf8')).wallet).toBeUndefined();
  });

  it('pnpm wallet is gpu wallet: its sign-in, an API key, a sign-in for one command that leaves none behind', async () => {
    const user = await signedIn(['renter']);
    const mine = await newKeypair('mine');
    const asUser = { GATEWAY_URL: url, GPU_CONFIG_DIR: user.config };
    // gpu's own sign-in: the wallet opened by pnpm wallet is gpu's default.
    const opened = await pnpmWallet(['open', '--keypair', mine.file], asUser);
    expect(opened.code, opened.stderr).toBe(0);
    const wallet = JSON.parse(opened.stdout) as { id: string; solana_address: string };
    expect(wallet.solana_address).toBe(mine.address);
    const list = answer(await user.gpu(['wallet', 'list', '--json']));
    expect(list.map((w: { id: string }) => w.id)).toEqual([wallet.id]);
    const viaAlias = await pnpmWallet(['list'], asUser);
    expect(JSON.parse(viaAlias.stdout)).toEqual(list);

    // An API key in GPU_TOKEN (once "Unexpected end of JSON input").
    const key = answer(await user.gpu(['keys', 'create', 'wallets', '--scope', 'wallet:read', '--json'])).api_key;
    const withKey = await pnpmWallet(['balance', '--wallet', wallet.id], { GATEWAY_URL: url, GPU_TOKEN: key });
    expect(withKey.code, withKey.stderr).toBe(0);
    expect(JSON.parse(withKey.stdout)).toMatchObject({ wallet_id: wallet.id, available: '0.000000' });
    // The keypair names the wallet by its address; an address of no wallet of theirs is refused.
    const byKeypair = await pnpmWallet(['balance', '--keypair', mine.file], { GATEWAY_URL: url, GPU_TOKEN: key });
    expect(JSON.parse(byKeypair.stdout)).toMatchObject({ wallet_id: wallet.id });
    const unopened = await newKeypair('unopened');
    const notTheirs = await pnpmWallet(['balance', '--keypair', unopened.file], { GATEWAY_URL: url, GPU_TOKEN: key });
    expect(notTheirs.code).toBe(1);
    expect(notTheirs.stdout).toBe('');
    expect(notTheirs.stderr).toContain(`gpu: no wallet of yours is at ${unopened.address}`);

    // --email and --password: signed in for the command, signed out after; the user's sign-ins are as they were.
    const signIns = async () => answer(await user.gpu(['sign-ins', '--json'])).length as number;
    const before = await signIns();
    for (let i = 0; i < 2; i++) {
      const once = await pnpmWallet(
        ['balance', '--wallet', wallet.id, '--email', user.email, '--password', user.password],
        {
          GATEWAY_URL: url,
        },
      );
      expect(once.code, once.stderr).toBe(0);
    }
    expect(await signIns()).toBe(before);
    const wrong = await pnpmWallet(['balance', '--email', user.email, '--password', 'not the password'], {
      GATEWAY_URL: url,
    });
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toMatch(/^pnpm wallet: signing in as [^\n]* auth answered 401 INVALID_CREDENTIALS[^\n]*\n$/);
  });
});

describe('a provider onboarded with gpu', () => {
  it('registers a machine and writes its daemon credentials (0600), which the daemon attaches to that machine with', async () => {
    const owner = await signedIn(['provider']);
    const added = answer(
      await owner.gpu([
        'provider',
        'machines',
        'add',
        'rig-1',
        '--gpu',
        '2xNVIDIA H100 80GB HBM3:81559:580.65.06',
        '--location',
        'eu-west',
        '--json',
      ]),
    );
    expect(added).toMatchObject({ name: 'rig-1', owner_id: owner.id, location: 'eu-west', daemon_client_id: null });
    expect(added.gpus).toHaveLength(2);
    expect(added.gpus[0]).toMatchObject({ model_name: 'NVIDIA H100 80GB HBM3', vram: 81559 });
    const bad = await owner.gpu(['provider', 'machines', 'add', 'rig-2', '--gpu', 'H100']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('takes [COUNTx]MODEL:VRAM_MB:DRIVER');
    expect(answer(await owner.gpu(['provider', 'machines', '--json'])).map((m: { id: string }) => m.id)).toEqual([
      added.id,
    ]);

    const file = join(dir, `credentials-${owner.id}.json`);
    const made = answer(await owner.gpu(['provider', 'daemon-credentials', 'rig-1', '--out', file, '--json']));
    expect(made).toMatchObject({ file, client: { role: 'daemon', owner_id: owner.id, name: 'rig-1' } });
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const written = JSON.parse(readFileSync(file, 'utf8'));
    expect(written).toMatchObject({ client_id: made.client.id, client_secret: expect.any(String) });
    // The secret is in the file alone.
    expect(JSON.stringify(made)).not.toContain(written.client_secret);
    // Never over a file: the one written stays as it was, and no client is made for nothing.
    const twice = await owner.gpu(['provider', 'daemon-credentials', 'rig-1b', '--out', file]);
    expect(twice).toMatchObject({
      code: 1,
      stderr: `gpu: cannot write ${file}: it exists (new credentials never replace a file)\n`,
    });
    expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual(written);

    // The daemon, with that file and the machine's name, attaches to the machine registered above and binds it.
    const configFile = join(dir, `daemon-${owner.id}.json`);
    writeFileSync(
      configFile,
      JSON.stringify({
        platform_url: url,
        credentials: { file },
        state_file: join(dir, `state-${owner.id}.json`),
        provider: { name: 'rig-1' },
        gpu: {
          source: 'simulated',
          simulated_gpus: Array.from({ length: 2 }, () => ({
            name: 'NVIDIA H100 80GB HBM3',
            memory_total_mib: 81559,
            driver_version: '580.65.06',
          })),
        },
      }),
    );
    const config = loadDaemonConfig({ DAEMON_CONFIG_FILE: configFile });
    const token = clientCredentials({ authUrl: config.auth_url, ...loadCredentials(config) });
    const logger = createLogger({ service: 'accounts-test', instanceId: 't', level: 'silent' });
    const id = await new ProviderDaemon({ config, logger, gpus: gpuSource(config.gpu), token }).attach();
    expect(id).toBe(added.id);
    const [bound] = answer(await owner.gpu(['provider', 'machines', '--json']));
    expect(bound).toMatchObject({ id: added.id, daemon_client_id: made.client.id });
  });
});
