/**
 * What `gpu` shows, run as a person runs it (child processes, a saved sign-in each) against the real auth service,
 * registry and billing behind the real gateway, billing's background relaying its prices and rentals to the
 * registry's inbox as under `pnpm start` (no NATS); machines registered at the registry by their owner, with no
 * daemon (rentals without a workload: tools/cli/test/cli.test.ts runs workloads):
 *
 * - the market searched as on Vast: minimum VRAM (GB or MB), disk, driver and compute capability, region, sorted by price
 *   per GPU-hour or per GB of VRAM, each offer's price explained (the model's base rate, the machine's own marked,
 *   the VRAM and power parts); nothing that matches said on standard error, exit status 0;
 * - money to the token's six decimals and reliability to two; `rent` saying how long the balance lasts; `sessions`
 *   with end, duration, end reason, and with `--json` the workload; the history's platform fee as a share of its
 *   payment;
 * - failures: `--json` makes them a JSON object on standard error; what to run next named as a command, never a
 *   route; a revoked or unknown API key told as such; a password reset saying what it ended;
 * - a machine's rates changed from two places at once, neither change lost.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Decimal } from 'decimal.js';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { registerAndLogin } from '../../../services/auth/test/helpers.ts';
import { registrySessionPublisher } from '../../../services/billing/src/adapters/registry-sessions.ts';
import { type Background, startBackground } from '../../../services/billing/src/background.ts';
import { base58Encode } from '../../../services/billing/src/domain/chain/base58.ts';
import type { BillingHarness } from '../../../services/billing/test/support/setup.ts';
import { gpu as gpuSpec, providerBody } from '../../../services/provider-registry/test/helpers.ts';
import { useAuthAndRegistry } from '../../../tests/support/auth-and-registry.ts';
import { billingWithRegistry } from '../../../tests/support/billing-with-registry.ts';
import { buildGateway } from '../../gateway/src/gateway.ts';
import { mailedCode } from './support/email-code.ts';
import { faultProxy, type Seen } from './support/fault-proxy.ts';
import { CLI_TEST_MS, type Gpu, type GpuResult, gpuAt } from './support/gpu.ts';

vi.setConfig({ testTimeout: CLI_TEST_MS });

// Its machines are registered by hand, with no daemon beating for them: they stay up however long the file takes on
// a busy machine (the registry's default takes a machine silent for 90 s for offline, and a rental of it is refused).
const platform = useAuthAndRegistry({}, { config: { offline_after: '1h' } });
const dir = mkdtempSync(join(tmpdir(), 'gpu-output-'));
let billing: BillingHarness;
let background: Background | undefined;
let gateway: Awaited<ReturnType<typeof buildGateway>> | undefined;
let url = '';

interface User {
  id: string;
  email: string;
  password: string;
  gpu: Gpu;
}

/** A new user of the platform's auth (address not verified), signed in with `gpu login` in a folder of their own. */
async function signedIn(roles: string[]): Promise<User & { token: string }> {
  const { user, email, password, tokens } = await registerAndLogin(platform.auth.app, { roles });
  const gpu = gpuAt(url, join(dir, user.id));
  const login = await gpu(['login', '--email', email], { input: `${password}\n` });
  expect(login, login.stderr).toMatchObject({ code: 0 });
  return { id: user.id, email, password, gpu, token: tokens.access_token };
}

/** What a run that succeeded printed, as JSON. */
function answer(r: GpuResult) {
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout);
}

/** A wallet of the user's own at billing, holding `funds`. */
async function walletOf(user: { id: string; token: string }, funds: string): Promise<string> {
  const made = await billing.app.inject({
    method: 'POST',
    url: '/api/v1/wallet',
    headers: { authorization: `Bearer ${user.token}` },
    payload: { owner_type: 'user', owner_id: user.id, solana_address: base58Encode(randomBytes(32)) },
  });
  expect(made.statusCode, made.body).toBe(201);
  await billing.credit(made.json().id, funds);
  return made.json().id;
}

/** `read` again every 100 ms until `done` holds of what it answers (or 30 s passed: what it answered last). */
async function eventually<T>(read: () => Promise<T>, done: (v: T) => boolean): Promise<T> {
  const end = Date.now() + 30_000;
  for (;;) {
    const v = await read();
    if (done(v) || Date.now() > end) return v;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The value of a field of a two-column table `gpu` printed (`│ field │ value │`). */
function field(table: string, name: string): string | undefined {
  const row = table.split('\n').find((line) => line.startsWith(`│ ${name} `));
  return row?.split('│')[2]?.trim();
}

interface Offer {
  provider_id: string;
  price_per_gpu_hour: string;
  price_per_vram_gb_hour: string;
  price_parts: Record<string, string>;
}

const A100 = gpuSpec();
const H100 = gpuSpec({
  model_name: 'NVIDIA H100 80GB HBM3',
  vram: 81559,
  driver_version: '535.104.05',
  architecture: 'Hopper',
  compute_capability: '9.0',
  power_consumption: 700,
});
const RTX = gpuSpec({
  model_name: 'NVIDIA GeForce RTX 4090',
  vram: 24564,
  driver_version: '560.35.03',
  architecture: 'Ada Lovelace',
  compute_capability: '8.9',
  power_consumption: 450,
});

let provider: User & { token: string };
let renter: User & { token: string };
/** This file's market: three machines in a region of their own. */
const region = `output-${randomUUID().slice(0, 8)}`;
const machines = { a100: '', h100: '', rtx: '' };

/** A machine registered at the registry by the provider, as its owner's own token may (its daemon states its disk). */
async function register(gpus: object[], diskMb?: number): Promise<string> {
  const res = await fetch(`${platform.registryUrl}/providers`, {
    method: 'POST',
    headers: { authorization: `Bearer ${provider.token}`, 'content-type': 'application/json' },
    body: JSON.stringify(
      providerBody({ owner_id: provider.id, location: region, gpus, ...(diskMb ? { disk_mb: diskMb } : {}) }),
    ),
  });
  expect(res.status, await res.clone().text()).toBe(201);
  return ((await res.json()) as { id: string }).id;
}

beforeAll(async () => {
  billing = await billingWithRegistry(platform);
  const billingUrl = await billing.app.listen({ host: '127.0.0.1', port: 0 });
  // Billing's messages to the registry (its prices, the GPUs it holds, rentals' ends), as `pnpm start` relays them.
  const toRegistry = registrySessionPublisher(billing.config.provider_registry, billing.ctx.logger);
  if (!toRegistry) throw new Error('billing has no registry to tell');
  background = await startBackground(billing.ctx, billing.config, toRegistry, undefined, null);
  gateway = await buildGateway({
    upstreams: {
      auth: platform.authUrl,
      'provider-registry': platform.registryUrl,
      billing: billingUrl,
      storage: 'http://127.0.0.1:9',
    },
    logLevel: 'silent',
  });
  url = await gateway.listen({ host: '127.0.0.1', port: 0 });

  provider = await signedIn(['provider']);
  renter = await signedIn(['renter']);
  machines.a100 = await register([A100, A100], 1024 * 1024);
  machines.h100 = await register([H100], 200 * 1024);
  machines.rtx = await register([RTX]);
  // The market lists them once billing's card has reached the registry.
  const listed = await eventually(
    () => renter.gpu(['offers', '--region', region, '--json']),
    (r) => r.code === 0 && JSON.parse(r.stdout).length === 3,
  );
  expect(answer(listed)).toHaveLength(3);
}, CLI_TEST_MS);

afterAll(async () => {
  await background?.stop();
  await gateway?.close();
  await billing?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('gpu offers', () => {
  const search = async (...args: string[]) =>
    (answer(await renter.gpu(['offers', '--region', region, ...args, '--json'])) as Offer[]).map((o) => o.provider_id);

  it('searches by VRAM (GB or MB), disk, driver, compute capability and region, sorted by price per GPU-hour or per GB', async () => {
    const { a100, h100, rtx } = machines;
    // Per GPU-hour (the platform's card: A100 2, H100 4, RTX 4090 0.5, VRAM 0.02 a GB, power 0.001 a W): the RTX
    // 4090 1.43, the A100 4.00, the H100 6.29. Per GB of VRAM: the A100 0.050, the RTX 0.060, the H100 0.079.
    expect(await search()).toEqual([rtx, a100, h100]);
    expect(await search('--sort', '-price')).toEqual([h100, a100, rtx]);
    expect(await search('--sort', 'vram_price')).toEqual([a100, rtx, h100]);
    expect(await search('--sort', '-vram_price')).toEqual([h100, rtx, a100]);
    // VRAM in GB of 1024 MB: the H100's 81559 MB are 79.6 GB, under 80GB; a bare number is MB.
    expect(await search('--min-vram', '40GB')).toEqual([a100, h100]);
    expect(await search('--min-vram', '80GB')).toEqual([a100]);
    expect(await search('--min-vram', '79GB')).toEqual([a100, h100]);
    expect(await search('--min-vram', '81559')).toEqual([a100, h100]);
    // The disk each workload gets, as the machine states it (the RTX's says nothing: left out).
    expect(await search('--min-disk', '200GB')).toEqual([a100, h100]);
    expect(await search('--min-disk', '1TB')).toEqual([a100]);
    expect(await search('--min-driver', '550')).toEqual([rtx, a100]);
    expect(await search('--min-driver', '535.104.05', '--max-price', '5')).toEqual([rtx, a100]);
    expect(await search('--min-compute-capability', '8.9')).toEqual([rtx, h100]);
    expect(await search('--architecture', 'hopper')).toEqual([h100]);
    expect(await search('--gpu-model', 'A100', '--min-free-gpus', '2')).toEqual([a100]);
    // Any case of the region.
    expect(answer(await renter.gpu(['offers', '--region', region.toUpperCase(), '--json']))).toHaveLength(3);

    // A size, a version or a sort the market does not take: a usage error, nothing asked.
    for (const bad of [
      ['--min-vram', 'lots'],
      ['--min-driver', 'latest'],
      ['--sort', 'cheapest'],
    ]) {
      const r = await renter.gpu(['offers', ...bad]);
      expect(r.code, bad.join(' ')).toBe(2);
    }
  });

  it('says that nothing matches on standard error, exit status 0 (with --json: [] and nothing else)', async () => {
    const none = await renter.gpu(['offers', '--region', region, '--gpu-model', 'H100', '--min-driver', '550']);
    expect(none).toMatchObject({ code: 0, stdout: '' });
    expect(none.stderr).toBe(
      `no offer matches --gpu-model H100 --min-driver 550 --region ${region} (fewer filters find more)\n`,
    );
    const json = await renter.gpu(['offers', '--region', region, '--min-vram', '200GB', '--json']);
    expect(json).toMatchObject({ code: 0, stderr: '' });
    expect(JSON.parse(json.stdout)).toEqual([]);
  });

  it("shows prices to six decimals, reliability to two, and what each price is made of, the machine's own rate marked", async () => {
    const table = await renter.gpu(['offers', '--region', region]);
    expect(table.code, table.stderr).toBe(0);
    const rowOf = (id: string) => table.stdout.split('\n').find((line) => line.includes(id)) ?? '';
    // The A100: 2 + 80 GB × 0.02 + 400 W × 0.001 = 4 a GPU-hour, 0.05 a GB-hour; no bid floor (it takes no bids).
    expect(rowOf(machines.a100)).toMatch(
      /│ 1\.00 +│ 4\.000000 +│ 0\.050000 +│ +│ 2\.000000 \+ 80 GB × 0\.02 \+ 400 W × 0\.001 +│/,
    );
    // The H100: 6.29294921875 shown half-even to six decimals; its VRAM in GB as its driver counts it.
    expect(rowOf(machines.h100)).toContain('│ 79.6 GB │');
    expect(rowOf(machines.h100)).toMatch(/│ 200\.0 GB +│/);
    expect(rowOf(machines.h100)).toMatch(
      /│ 6\.292949 +│ 0\.079010 +│ +│ 4\.000000 \+ 79\.647 GB × 0\.02 \+ 700 W × 0\.001 +│/,
    );

    // The provider sets the H100's own base rate: billing tells the registry, and the offer shows it, marked.
    const set = await provider.gpu(['rates', 'set', machines.h100, '--base', 'H100=3']);
    expect(set.code, set.stderr).toBe(0);
    const repriced = await eventually(
      async () => answer(await renter.gpu(['offers', '--region', region, '--json'])) as Offer[],
      (list) => list.some((o) => o.provider_id === machines.h100 && o.price_parts.base_source === 'provider'),
    );
    const h100 = repriced.find((o) => o.provider_id === machines.h100)!;
    expect(h100.price_parts).toMatchObject({ base: '3', base_source: 'provider', vram_rate_source: 'platform' });
    const parts = h100.price_parts;
    expect(new Decimal(parts.base!).plus(parts.vram!).plus(parts.power!).eq(h100.price_per_gpu_hour)).toBe(true);
    const again = await renter.gpu(['offers', '--region', region, '--gpu-model', 'H100']);
    expect(again.stdout).toMatch(/│ 5\.292949 +│ [0-9.]+ +│ +│ 3\.000000\* \+ 79\.647 GB × 0\.02 \+ 700 W × 0\.001 +│/);
    // The help says what the mark means.
    const help = (await renter.gpu(['offers', '--help'])).stdout.replace(/\s+/g, ' ');
    expect(help).toContain("* marks the machine's own rate, the others are the platform's");
  });

  it('finds the machines that take bids, at most a bid floor, lowest floor first, and shows each floor', async () => {
    const { a100, rtx } = machines;
    // None takes bids yet: the market sorted by bid floor is empty, and says so.
    const noBids = await renter.gpu(['offers', '--sort', 'bid_floor']);
    expect(noBids).toMatchObject({ code: 0, stdout: '' });
    expect(noBids.stderr).toBe('no offers at a bid: no machine that takes bids has free GPUs on the market now\n');
    // Their owner takes bids on two of them (the platform's prices still apply to the rest).
    for (const [machine, floor] of [
      [rtx, '0.3'],
      [a100, '1.2'],
    ] as const) {
      const set = await provider.gpu(['rates', 'set', machine!, '--bid-floor', floor]);
      expect(set.code, set.stderr).toBe(0);
    }
    await eventually(
      () => search('--max-bid', '2'),
      (found) => found.length === 2,
    );
    expect(await search('--max-bid', '1')).toEqual([rtx]);
    expect(await search('--max-bid', '0.29')).toEqual([]);
    expect(await search('--sort', 'bid_floor')).toEqual([rtx, a100]);
    expect(await search('--sort', '-bid_floor')).toEqual([a100, rtx]);
    const table = await renter.gpu(['offers', '--region', region, '--max-bid', '2']);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toContain('bid floor');
    expect(table.stdout.split('\n').find((line) => line.includes(rtx!))).toMatch(/│ 0\.300000 +│/);
    const none = await renter.gpu(['offers', '--region', region, '--max-bid', '0.1']);
    expect(none.stderr).toBe(`no offer matches --max-bid 0.1 --region ${region} (fewer filters find more)\n`);
    expect((await renter.gpu(['offers', '--max-bid', 'cheap'])).code).toBe(2);
  });
});

describe('money, rentals and sessions', () => {
  it('rents saying how long the balance lasts, ends, and lists the session with its end, duration and reason', async () => {
    const user = await signedIn(['renter']);
    const wallet = await walletOf(user, '10');
    const rented = await user.gpu(['rent', '--machine', machines.a100, '--gpu-model', 'A100', '--wallet', wallet]);
    expect(rented.code, rented.stderr).toBe(0);
    const id = field(rented.stdout, 'session')!;
    expect(field(rented.stdout, 'per hour')).toBe('4.000000');
    expect(field(rented.stdout, 'held now')).toBe('4.000000');
    expect(field(rented.stdout, 'available')).toBe('6.000000');
    // 10 tokens at 4 an hour: two and a half hours, said as what it is.
    expect(field(rented.stdout, 'balance lasts')).toBe('2 h 30 min at 4.000000 an hour (what your balance pays for)');
    expect(rented.stdout).not.toContain('runs for');

    const running = await user.gpu(['sessions']);
    expect(running.stdout).toMatch(new RegExp(`│ ${id} .*│ active .*│ [^│]+ \\(running\\) `));
    const ended = await user.gpu(['end', id]);
    expect(ended.code, ended.stderr).toBe(0);
    // A started minute at 4 an hour, of which the platform's 5 %.
    expect(ended.stdout).toMatch(/│ 1 +│ 0\.066667 │ 0\.003333 +│/);

    const listed = await user.gpu(['sessions']);
    expect(listed.stdout).toMatch(/│ session .*│ ended .*│ ran .*│ end reason .*│ exit .*│ cost/);
    const row = listed.stdout.split('\n').find((line) => line.includes(id)) ?? '';
    expect(row).toMatch(
      /│ completed │ \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ │ \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ │ [^│]+│ ended +│ +│ 0\.066667 │/,
    );
    const json = answer(await user.gpu(['sessions', '--json']));
    expect(json.find((s: { id: string }) => s.id === id)).toMatchObject({
      status: 'completed',
      end_reason: 'ended',
      total_cost: '0.066667',
      workload: null,
    });
    expect(answer(await user.gpu(['sessions', '--limit', '1', '--json']))).toHaveLength(1);

    // The history: the payment's fee is the platform's share of it, not a charge beside it.
    const history = answer(await user.gpu(['wallet', 'history', wallet, '--json']));
    const payment = history.find((t: { type: string }) => t.type === 'payment');
    expect(payment).toMatchObject({ amount: '0.066667', fee: '0.003333' });
    const table = await user.gpu(['wallet', 'history', wallet]);
    expect(table.stdout).toContain("of it the platform's");
    const share = new Decimal('0.003333').div('0.066667').mul(100).toDecimalPlaces(1).toFixed();
    expect(table.stdout).toMatch(new RegExp(`│ payment │ confirmed │ 0\\.066667 │ 0\\.003333 \\(${share}%\\) +│`));
  });

  it('quotes a machine saying what the price is made of and the fee as part of the total', async () => {
    const quote = await renter.gpu(['quote', '--machine', machines.rtx, '--gpu-model', 'RTX 4090', '--hours', '2']);
    expect(quote.code, quote.stderr).toBe(0);
    expect(field(quote.stdout, 'base per hour')).toBe("0.500000 (the platform's rate 0.500000 a GPU)");
    expect(field(quote.stdout, 'VRAM per hour')).toBe('0.479766 (24.0 GB)');
    expect(field(quote.stdout, 'per hour')).toBe('1.429766');
    expect(field(quote.stdout, 'total')).toBe('2.859531');
    expect(field(quote.stdout, 'platform fee (of it)')).toMatch(/^0\.14\d{4}$/);
    // A duration billing would not read: a usage error, nothing asked.
    const bad = await renter.gpu(['quote', '--machine', machines.rtx, '--gpu-model', 'RTX 4090', '--hours', 'two']);
    expect(bad).toMatchObject({ code: 2, stdout: '', stderr: expect.stringContaining('--hours takes a decimal') });
  });
});

describe('failures', () => {
  it('are one JSON object on standard error with --json: a problem, a usage error', async () => {
    const missing = await renter.gpu(['end', randomUUID(), '--json']);
    expect(missing).toMatchObject({ code: 1, stdout: '' });
    expect(missing.stderr.endsWith('\n')).toBe(true);
    expect(JSON.parse(missing.stderr)).toMatchObject({
      status: 404,
      code: 'SESSION_NOT_FOUND',
      detail: expect.any(String),
      request_id: expect.any(String),
    });
    const usage = await renter.gpu(['offers', '--sort', 'sideways', '--json']);
    expect(usage).toMatchObject({ code: 2, stdout: '' });
    expect(JSON.parse(usage.stderr)).toMatchObject({
      status: null,
      code: 'USAGE_ERROR',
      detail: expect.stringContaining('sideways'),
    });
    const unknown = await renter.gpu(['sessions', '--frobnicate', '--json']);
    expect(unknown.code).toBe(2);
    expect(JSON.parse(unknown.stderr)).toMatchObject({ code: 'USAGE_ERROR', detail: expect.stringContaining('frob') });
    // Without --json: the one line, as before.
    expect((await renter.gpu(['end', randomUUID()])).stderr).toMatch(/^gpu: SESSION_NOT_FOUND: [^\n]+\n$/);
  });

  it('name what to run next as a command, never a route: an address not verified', async () => {
    const wallet = await walletOf(renter, '5');
    const text = await renter.gpu(['wallet', 'withdraw', wallet, '--amount', '1']);
    expect(text.code).toBe(1);
    expect(text.stderr).toBe(
      'gpu: EMAIL_NOT_VERIFIED: withdrawals need a verified e-mail address (gpu email send mails you a code, gpu ' +
        'email verify takes it; then run this again)\n',
    );
    const json = await renter.gpu(['wallet', 'withdraw', wallet, '--amount', '1', '--json']);
    expect(JSON.parse(json.stderr)).toMatchObject({
      status: 403,
      code: 'EMAIL_NOT_VERIFIED',
      hint: expect.stringContaining('gpu email verify'),
    });
    expect(text.stderr + json.stderr).not.toMatch(/(GET|POST|PUT|DELETE) \//);
  });

  it('tell a revoked key, an unknown key and a reset that revoked the keys as such', async () => {
    const user = await signedIn(['renter']);
    const created = answer(await user.gpu(['keys', 'create', 'ci', '--scope', 'offers', '--json']));
    const withKey = { env: { GPU_API_KEY: created.api_key } };
    expect((await user.gpu(['offers', '--region', region], withKey)).code).toBe(0);
    // Past its scope: which scope it lacks, and the command that makes a key with it.
    expect((await user.gpu(['sessions'], withKey)).stderr).toBe(
      'gpu: INSUFFICIENT_SCOPE: this action needs an API key with the scope sessions (a new key with it: gpu keys ' +
        'create <name> --scope sessions)\n',
    );
    expect((await user.gpu(['keys', 'revoke', created.key.id])).code).toBe(0);
    const revoked = await user.gpu(['offers'], withKey);
    expect(revoked.code).toBe(1);
    expect(revoked.stderr).toBe(
      'gpu: API_KEY_REVOKED: the API key in GPU_API_KEY was revoked (make a new one, signed in: gpu login --email ' +
        '<address>, then gpu keys create <name> --scope <scope>)\n',
    );
    const asJson = await user.gpu(['offers', '--json'], withKey);
    expect(JSON.parse(asJson.stderr)).toMatchObject({ status: 401, code: 'API_KEY_REVOKED' });
    // A key the platform never made.
    const typo = await user.gpu(['offers'], { env: { GPU_API_KEY: `${created.api_key.slice(0, -4)}xxxx` } });
    expect(typo.code).toBe(1);
    expect(typo.stderr).toMatch(/^gpu: INVALID_CLIENT: the API key in GPU_API_KEY is not one this platform knows/);

    // A password reset with a mailed code (as auth mails one: only its hash is kept) ends the keys made before.
    const second = answer(await user.gpu(['keys', 'create', 'nightly', '--scope', 'offers', '--json']));
    const next = 'a new password after the reset';
    const reset = await user.gpu(['password', 'reset'], {
      env: { GPU_RESET_CODE: await mailedCode(platform.auth.db, user, 'reset_password'), GPU_NEW_PASSWORD: next },
    });
    expect(reset.code, reset.stderr).toBe(0);
    expect(reset.stdout).toContain('every sign-in ended, your API keys and daemon credentials are revoked');
    expect(reset.stdout).toContain('gpu login --email');
    const gone = await user.gpu(['offers'], { env: { GPU_API_KEY: second.api_key } });
    expect(gone.stderr).toMatch(/^gpu: API_KEY_REVOKED: /);
    // The saved sign-in ended too: log in again.
    const signedOut = await user.gpu(['whoami']);
    expect(signedOut.code).toBe(1);
    expect(signedOut.stderr).toMatch(/\(gpu login --email <address>\)\n$/);
    const json = await user.gpu(['password', 'reset', '--json'], {
      env: {
        GPU_RESET_CODE: await mailedCode(platform.auth.db, user, 'reset_password'),
        GPU_NEW_PASSWORD: `${next} again`,
      },
    });
    expect(answer(json)).toEqual({
      password_reset: true,
      ended: ['sign_ins', 'api_keys', 'daemon_credentials', 'ssh_keys'],
    });
  });
});

describe("a machine's rates", () => {
  it('change from two places at once without losing either change (each written only over what it read)', async () => {
    const proxy = await faultProxy(url);
    try {
      const viaProxy = gpuAt(proxy.url, join(dir, 'rates-race'));
      const login = await viaProxy(['login', '--email', provider.email], { input: `${provider.password}\n` });
      expect(login.code, login.stderr).toBe(0);
      expect((await viaProxy(['provider', 'rates', 'set', machines.rtx, '--bid-floor', '0.3'])).code).toBe(0);
      // Both changes read the same rates, then their writes are held until both are under way.
      const put = (r: Seen) => r.method === 'PUT' && /^\/api\/v1\/provider\/[^/]+\/rates$/.test(r.url);
      const puts = proxy.seen.filter(put).length;
      const held = proxy.gate(put, 2);
      const [base, vram] = await Promise.all([
        viaProxy(['provider', 'rates', 'set', machines.rtx, '--base', 'RTX 4090=0.7']),
        viaProxy(['provider', 'rates', 'set', machines.rtx, '--vram-rate', '0.03']),
      ]);
      held.end();
      expect(base.code, base.stderr).toBe(0);
      expect(vram.code, vram.stderr).toBe(0);
      expect(held.most()).toBe(2);
      // One write was refused (a change made since its read) and made again over the other's.
      expect(proxy.seen.filter(put).length - puts).toBe(3);
      expect(answer(await provider.gpu(['provider', 'rates', 'show', machines.rtx, '--json']))).toMatchObject({
        base_rates: { 'nvidia-geforce-rtx-4090': '0.7' },
        vram_rate_per_gb_hour: '0.03',
        bid_floor: '0.3',
      });
    } finally {
      await proxy.close();
    }
  });
});
