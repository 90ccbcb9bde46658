/**
 * `gpu` run as a person runs it (a child process) against a platform with a machine that runs workloads: the real
 * auth service, registry, billing and storage (on the tests' S3 server) behind the platform's gateway, and a provider
 * daemon running workloads in the real bubblewrap sandbox (the provider daemon's workload rig). Its users are its own
 * auth's, so signing them up costs nothing of `pnpm start`'s hourly sign-up budget.
 */
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { NoopPublisher } from '@gpu/common';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { registerAndLogin } from '../../../services/auth/test/helpers.ts';
import { startBackground } from '../../../services/billing/src/background.ts';
import { base58Encode } from '../../../services/billing/src/domain/chain/base58.ts';
import { endSessionsOfStoppedProvider } from '../../../services/billing/src/domain/sessions/provider-offline.ts';
import { buildGateway } from '../../gateway/src/gateway.ts';
import type { ProviderDaemon } from '../../provider-daemon/src/daemon.ts';
import type { WorkloadRunner } from '../../provider-daemon/src/workloads/runner.ts';
import { containerSettings, testImage } from '../../provider-daemon/test/support/containers.ts';
import { until, useWorkloadRig } from '../../provider-daemon/test/support/workload-rig.ts';
import { mailedCode } from './support/email-code.ts';
import { CLI_TEST_MS, type Gpu, type GpuResult, gpuAt, gpuCommandLine, root } from './support/gpu.ts';

vi.setConfig({ testTimeout: CLI_TEST_MS });

const run = promisify(execFile);
// The rig's daemons beat only when a test asks them to: their machines stay up however long the file takes on a busy
// machine (the registry's default takes a machine silent for 90 s for offline); the tests take one offline explicitly.
const rig = useWorkloadRig({ storage: true, registry: { config: { offline_after: '1h' } } });
const dir = mkdtempSync(join(tmpdir(), 'gpu-cli-'));
let gateway: Awaited<ReturnType<typeof buildGateway>> | undefined;
let url = '';

interface User {
  id: string;
  email: string;
  password: string;
  token: string;
  gpu: Gpu;
}

/** A new user of the rig's auth, signed in with `gpu login` (the password on standard input) in a folder of their own. */
async function signedIn(roles: string[]): Promise<User> {
  const { user, email, password, tokens } = await registerAndLogin(rig.platform.auth.app, { roles });
  const gpu = gpuAt(url, join(dir, user.id));
  const login = await gpu(['login', '--email', email], { input: `${password}\n` });
  expect(login, login.stderr).toMatchObject({ code: 0 });
  return { id: user.id, email, password, token: tokens.access_token, gpu };
}

/** A code to verify `user`'s address, as auth mails one. */
const verificationCode = (user: User) => mailedCode(rig.platform.auth.db, user, 'verify_email');

/** What a run that succeeded printed, as JSON. */
function answer(r: GpuResult) {
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout);
}

/** One line on standard error with the platform's code, exit status 1. */
function refused(r: { code: number; stderr: string }, code: string) {
  expect(r.stderr).toMatch(new RegExp(`^gpu: ${code}: [^\\n]+\\n$`));
  expect(r.code).toBe(1);
}

let renter: User;
let provider: User;
let walletId = '';
let machineId = '';
let runner: WorkloadRunner;
let daemon: ProviderDaemon;

beforeAll(async () => {
  const billing = rig.billing.app.server.address();
  if (!billing || typeof billing === 'string') throw new Error('billing is not listening on a port');
  gateway = await buildGateway({
    upstreams: {
      auth: rig.platform.authUrl,
      storage: rig.storage.url,
      'provider-registry': rig.platform.registryUrl,
      billing: `http://127.0.0.1:${billing.port}`,
    },
    logLevel: 'silent',
  });
  url = await gateway.listen({ host: '127.0.0.1', port: 0 });

  renter = await signedIn(['renter']);
  const wallet = await rig.billing.app.inject({
    method: 'POST',
    url: '/api/v1/wallet',
    headers: { authorization: `Bearer ${renter.token}` },
    payload: { owner_type: 'user', owner_id: renter.id, solana_address: base58Encode(randomBytes(32)) },
  });
  expect(wallet.statusCode, wallet.body).toBe(201);
  walletId = wallet.json().id;
  await rig.billing.credit(walletId, '100');

  // The rig's machines belong to a user it makes; this one to a provider who signs in with gpu.
  provider = await signedIn(['provider']);
  const makeOwner = rig.platform.providerUser;
  rig.platform.providerUser = async () => ({ id: provider.id });
  try {
    // With container mode too, as the test setup made it possible (Podman, its busybox image on the machine).
    const m = await rig.machine(containerSettings);
    machineId = m.providerId;
    daemon = m.daemon;
    runner = m.runner();
    runner.run();
  } finally {
    rig.platform.providerUser = makeOwner;
  }
});

afterAll(async () => {
  await runner?.stop();
  await gateway?.close();
  rmSync(dir, { recursive: true, force: true });
});

const rental = () => ['--machine', machineId, '--gpu-model', 'H100', '--wallet', walletId];

describe('gpu against a platform whose machine runs workloads', () => {
  it('runs a workload with gpu run: its input and environment, its logs, its outputs downloaded, its exit code', async () => {
    const input = join(dir, 'in.txt');
    writeFileSync(input, 'from storage\n');
    expect((await renter.gpu(['storage', 'cp', input, 'gpu:data/in.txt'])).code).toBe(0);
    const outputs = join(dir, 'outputs');
    const script = [
      'echo "$GREETING"',
      'cat /work/inputs/data/in.txt',
      'echo to-stderr >&2',
      'mkdir -p /work/output/sub',
      'echo result > /work/output/sub/result.txt',
      'exit 3',
    ].join('; ');
    const ran = await renter.gpu([
      'run',
      ...rental(),
      '--input',
      'data/in.txt',
      '--env',
      'GREETING=hello',
      '--max-runtime',
      '60s',
      '--download',
      outputs,
      '--',
      'sh',
      '-c',
      script,
    ]);
    expect(ran.code, ran.stderr).toBe(3);
    expect(ran.stdout).toBe('hello\nfrom storage\n');
    expect(ran.stderr).toContain('to-stderr\n');
    expect(ran.stderr).toContain('workload exited with 3');
    expect(ran.stderr).toMatch(/output sessions\/[0-9a-f-]{36}\/output\/sub\/result\.txt \(7 bytes\) -> /);
    expect(readFileSync(join(outputs, 'sub', 'result.txt'), 'utf8')).toBe('result\n');
    // Written through a temporary file renamed once whole (as `storage cp` writes one): nothing else is left there.
    expect(readdirSync(join(outputs, 'sub'))).toEqual(['result.txt']);

    // Stopped at its --max-runtime: exit status 1, and why.
    const stopped = await renter.gpu(['run', ...rental(), '--max-runtime', '1s', '--', 'sleep', '60']);
    expect(stopped.code, stopped.stderr).toBe(1);
    expect(stopped.stderr).toMatch(/workload stopped \(max_runtime\)/);
    // A program that is not there never starts: a shell's exit status, 127, and nothing billed.
    const typo = await renter.gpu(['run', ...rental(), '--', 'pyhton3', 'train.py']);
    expect(typo.code, typo.stderr).toBe(127);
    expect(typo.stderr).toMatch(/workload failed \(command_not_found\); session [0-9a-f-]{36} cost 0(\.0+)?\n/);
    // With --json: the logs on standard error, the workload at its end on standard output.
    const json = await renter.gpu(['run', ...rental(), '--json', '--', 'echo', 'as json']);
    expect(json.code, json.stderr).toBe(0);
    expect(JSON.parse(json.stdout)).toMatchObject({ state: 'exited', exit_code: 0, outputs: null });
    expect(json.stderr).toContain('as json\n');
    // An image in a container, its own command replaced by the argv after --.
    const boxed = await renter.gpu([
      'run',
      ...rental(),
      '--image',
      testImage,
      '--',
      '/bin/busybox',
      'sh',
      '-c',
      'echo "in a container: $CUDA_VISIBLE_DEVICES"; exit 4',
    ]);
    expect(boxed.code, boxed.stderr).toBe(4);
    expect(boxed.stdout).toMatch(/^in a container: GPU-simulated-\d\n$/);
    // run needs something to run.
    const nothing = await renter.gpu(['run', ...rental()]);
    expect(nothing.code).toBe(2);
    expect(nothing.stderr).toContain('run needs a workload');
    // A workload's option on a rental without one would be dropped: refused, nothing rented.
    for (const option of [['--max-runtime', '2h'], ['--network'], ['--env', 'A=1']]) {
      const alone = await renter.gpu(['rent', ...rental(), ...option]);
      expect(alone, option.join(' ')).toMatchObject({ code: 2, stdout: '' });
      expect(alone.stderr).toContain('are for a workload');
    }
  });

  it('rents with a workload and follows its log with gpu logs -f until it ends; rents without one and ends it', async () => {
    const rented = await renter.gpu([
      'rent',
      ...rental(),
      '--json',
      '--',
      'sh',
      '-c',
      'echo one; sleep 2; echo two; echo oops >&2',
    ]);
    expect(rented.code, rented.stderr).toBe(0);
    const started = JSON.parse(rented.stdout);
    expect(started.session).toMatchObject({ provider_id: machineId, gpu_count: 1, workload: true });
    const id = started.session.id as string;
    const followed = await renter.gpu(['logs', id, '-f']);
    expect(followed).toMatchObject({ code: 0, stdout: 'one\ntwo\n', stderr: 'oops\n' });
    const logs = answer(await renter.gpu(['logs', id, '--json']));
    expect(logs).toEqual({
      session_id: id,
      state: 'exited',
      exit_code: 0,
      reason: null,
      stdout: 'one\ntwo\n',
      stderr: 'oops\n',
    });
    // The sessions: how each ended, its workload's exit code; with --json, its workload.
    const sessions = answer(await renter.gpu(['sessions', '--json']));
    expect(sessions.find((s: { id: string }) => s.id === id)).toMatchObject({
      end_reason: 'workload_exited',
      workload: { state: 'exited', exit_code: 0, spec: { command: ['sh', '-c', expect.stringContaining('echo one')] } },
    });
    const table = (await renter.gpu(['sessions'])).stdout.split('\n');
    expect(table.find((line) => line.includes(id))).toMatch(/│ workload_exited +│ 0 +│ \d+\.\d{6} │/);

    // A session without a workload: printed as a table, has no logs, ended by its renter.
    const plain = await renter.gpu(['rent', ...rental(), '--max-rate', '100', '--spend-cap', '5']);
    expect(plain.code, plain.stderr).toBe(0);
    const plainId = /session\s*│\s*([0-9a-f-]{36})/.exec(plain.stdout)?.[1];
    expect(plainId, plain.stdout).toBeDefined();
    refused(await renter.gpu(['logs', plainId!]), 'WORKLOAD_NOT_FOUND');
    expect((await renter.gpu(['end', plainId!])).code).toBe(0);
    // A rate below the machine's price is refused, nothing rented.
    refused(await renter.gpu(['rent', ...rental(), '--max-rate', '0.000001']), 'PRICE_NOT_ACCEPTED');
  });

  it('ends gpu run, saying so, when its machine is lost under the workload and the platform ends the session', async () => {
    // A machine whose daemon is a process of its own, killed with SIGKILL once the workload runs: nothing reports
    // the workload's end any more, as with a machine that lost its power.
    const lost = await rig.daemonProcess();
    const ran = renter.gpu([
      'run',
      '--machine',
      lost.providerId,
      '--gpu-model',
      'H100',
      '--wallet',
      walletId,
      '--',
      'sh',
      '-c',
      'echo up; sleep 600',
    ]);
    const { db } = rig.billing.ctx;
    const session = await until(
      () =>
        db
          .selectFrom('session_workloads as w')
          .innerJoin('rental_sessions as s', 's.id', 'w.session_id')
          .select(['s.id', 'w.state'])
          .where('s.provider_id', '=', lost.providerId)
          .executeTakeFirst(),
      (row) => row?.state === 'running',
      60_000,
    );
    lost.child.kill('SIGKILL');
    await lost.exited;
    // The registry's verdict (offline: off the market for the tests after this one), then billing hearing it: the
    // session ends, the workload still shows running.
    const service = await rig.platform.machineClient('service');
    const verdict = await rig.platform.registry.app.inject({
      method: 'PATCH',
      url: `/providers/${lost.providerId}/status`,
      headers: { authorization: `Bearer ${await service.get()}` },
      payload: { status: 'offline' },
    });
    expect(verdict.statusCode, verdict.body).toBe(200);
    const ended = await endSessionsOfStoppedProvider(rig.billing.ctx, {
      providerId: lost.providerId,
      status: 'offline',
      occurredAt: new Date(),
    });
    expect(ended.map((e) => e.session.id)).toEqual([session!.id]);
    const result = await ran;
    expect(result.stderr).toMatch(
      /workload lost with its machine: its session ended \(provider_offline\) and the machine reported no end; session \S+ cost/,
    );
    expect(result.code).toBe(1);
  });

  it('says what gpu run waits for, and stops waiting when the machine goes offline before the workload runs', async () => {
    // A machine whose daemon takes no workload (its runner never polls): the workload stays pending.
    const idle = await rig.machine();
    const [node, ...args] = gpuCommandLine([
      'run',
      '--machine',
      idle.providerId,
      '--gpu-model',
      'H100',
      '--wallet',
      walletId,
      '--',
      'true',
    ]);
    const child = spawn(node!, args, {
      cwd: root,
      env: { ...process.env, GPU_URL: url, GPU_CONFIG_DIR: join(dir, renter.id), NO_COLOR: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
    });
    const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
    // What it waits for, and for how long, on standard error: read as it comes.
    const waiting = new RegExp(`waiting for machine ${idle.providerId} to take the workload \\(pending, \\d+ s\\)`);
    await until(
      async () => stderr,
      (text) => waiting.test(text),
      60_000,
    );
    expect(stderr).toMatch(waiting);
    // The registry takes the machine for offline, billing hears it and ends the session: gpu run stops waiting.
    const service = await rig.platform.machineClient('service');
    const verdict = await rig.platform.registry.app.inject({
      method: 'PATCH',
      url: `/providers/${idle.providerId}/status`,
      headers: { authorization: `Bearer ${await service.get()}` },
      payload: { status: 'offline' },
    });
    expect(verdict.statusCode, verdict.body).toBe(200);
    const ended = await endSessionsOfStoppedProvider(rig.billing.ctx, {
      providerId: idle.providerId,
      status: 'offline',
      occurredAt: new Date(),
    });
    expect(ended).toHaveLength(1);
    expect(await exited).toBe(1);
    expect(stderr).toMatch(
      new RegExp(
        `machine ${idle.providerId} went away \\(provider_offline\\) before the workload ran: session ` +
          `${ended[0]!.session.id} ended; it cost 0\\.000000\n$`,
      ),
    );
  });

  it('submits a job with gpu jobs submit, follows it to its end with gpu jobs logs -f, lists, shows and cancels jobs', async () => {
    // The market lists the machine once it has the platform's prices and the machine is online; billing's own
    // background places the jobs.
    await rig.priceTheMarket();
    await daemon.heartbeat();
    const beat = setInterval(() => daemon.heartbeat().catch(() => {}), 5_000);
    const background = await startBackground(rig.billing.ctx, rig.billing.config, new NoopPublisher(), undefined, null);
    try {
      const terms = ['--wallet', walletId, '--gpu-model', 'H100', '--spend-cap', '5'];
      const submitted = answer(
        await renter.gpu([
          'jobs',
          'submit',
          ...terms,
          '--max-price',
          '100',
          '--name',
          'cli-job',
          '--checkpoint-every',
          '5',
          '--json',
          '--',
          'sh',
          '-c',
          'echo step; echo note >&2',
        ]),
      );
      // Queued: billing's background may have placed it already (its first attempt in the answer), not run it.
      expect(submitted).toMatchObject({ state: 'queued', name: 'cli-job', checkpoint: null });
      expect(submitted.attempts.length).toBeLessThanOrEqual(1);
      expect(submitted.workload.checkpoint).toEqual({ interval_seconds: 5 });
      const followed = await renter.gpu(['jobs', 'logs', submitted.id, '-f']);
      expect(followed.code, followed.stderr).toBe(0);
      expect(followed.stdout).toBe('step\n');
      expect(followed.stderr).toMatch(/^note\njob succeeded; spent \d+\.\d+\n$/);
      // With --json: one object on standard output, the logs in it.
      const asJson = await renter.gpu(['jobs', 'logs', submitted.id, '--json']);
      expect(asJson.code, asJson.stderr).toBe(0);
      expect(JSON.parse(asJson.stdout)).toMatchObject({
        id: submitted.id,
        state: 'succeeded',
        stdout: 'step\n',
        stderr: 'note\n',
      });
      const shown = answer(await renter.gpu(['jobs', 'show', submitted.id, '--json']));
      expect(shown).toMatchObject({ state: 'succeeded', reason: null });
      expect(shown.attempts.map((a: { provider_id: string }) => a.provider_id)).toEqual([machineId]);
      const table = await renter.gpu(['jobs', 'show', submitted.id]);
      expect(table.stdout).toContain('succeeded');
      expect(table.stdout).toContain(shown.attempts[0].session_id);
      const listed = answer(await renter.gpu(['jobs', 'list', '--state', 'succeeded', '--json']));
      expect(listed.map((j: { id: string }) => j.id)).toContain(submitted.id);
      // A state billing has not, or a fallback without a bid to fall back from: usage errors, nothing asked.
      expect(await renter.gpu(['jobs', 'list', '--state', 'done'])).toMatchObject({
        code: 2,
        stderr: expect.stringContaining('done is not one of queued'),
      });
      // A list, as billing takes it.
      const both = answer(await renter.gpu(['jobs', 'list', '--state', 'succeeded,failed', '--json']));
      expect(both.map((j: { id: string }) => j.id)).toContain(submitted.id);
      const fallback = await renter.gpu([
        'jobs',
        'submit',
        ...terms,
        '--max-price',
        '1',
        '--on-demand-fallback',
        '--',
        'true',
      ]);
      expect(fallback).toMatchObject({
        code: 2,
        stdout: '',
        stderr: expect.stringContaining('--on-demand-fallback is for'),
      });
      // Terms no machine could meet: refused, naming what is missing; with --wait-for-capacity, queued.
      const nine = ['jobs', 'submit', ...terms, '--gpus', '9', '--max-price', '100'];
      refused(await renter.gpu([...nine, '--', 'true']), 'NO_MACHINE_COULD_MEET');
      const waiting = answer(await renter.gpu([...nine, '--wait-for-capacity', '--json', '--', 'true']));
      expect(waiting).toMatchObject({ state: 'queued' });
      const cancelled = answer(await renter.gpu(['jobs', 'cancel', waiting.id, '--json']));
      expect(cancelled).toMatchObject({ state: 'cancelled', reason: 'cancelled by its renter' });
      // A job that fails: jobs logs -f exits 1 and says why.
      const failing = answer(
        await renter.gpu(['jobs', 'submit', ...terms, '--max-price', '100', '--json', '--', 'sh', '-c', 'exit 4']),
      );
      const failed = await renter.gpu(['jobs', 'logs', failing.id, '-f']);
      expect(failed.code).toBe(1);
      expect(failed.stderr).toContain('job failed (workload_exited: the workload exited with 4)');
      const failedJson = await renter.gpu(['jobs', 'logs', failing.id, '-f', '--json']);
      expect(failedJson.code).toBe(1);
      expect(JSON.parse(failedJson.stdout)).toMatchObject({ state: 'failed', reason: expect.stringContaining('4') });
    } finally {
      clearInterval(beat);
      await background.stop();
    }
  });

  it("shows the wallet's history page by page, and how to deposit or withdraw (refused here: no chain)", async () => {
    const all = answer(await renter.gpu(['wallet', 'history', walletId, '--json']));
    expect(all.length).toBeGreaterThan(2);
    expect(new Set(all.map((t: { type: string }) => t.type))).toContain('payment');
    const two = answer(await renter.gpu(['wallet', 'history', walletId, '--limit', '2', '--json']));
    expect(two).toEqual(all.slice(0, 2));
    // Page after page (two a page here): the same list.
    expect(answer(await renter.gpu(['wallet', 'history', walletId, '--page-size', '2', '--json']))).toEqual(all);
    // Past what one request may ask for: a usage error here, not the service's refusal.
    expect((await renter.gpu(['wallet', 'history', walletId, '--page-size', '1001'])).code).toBe(2);
    const payments = answer(await renter.gpu(['wallet', 'history', walletId, '--type', 'payment', '--json']));
    expect(payments).toEqual(all.filter((t: { type: string }) => t.type === 'payment'));
    expect((await renter.gpu(['wallet', 'history', walletId])).stdout).toContain('payment');
    expect((await renter.gpu(['wallet', 'history', walletId, '--type', 'gift'])).code).toBe(2);

    refused(await renter.gpu(['wallet', 'deposit', walletId]), 'SOLANA_NOT_CONFIGURED');
    const signature = '5'.repeat(87);
    refused(await renter.gpu(['wallet', 'deposit', walletId, '--signature', signature]), 'ADDRESS_NOT_PROVEN');
    const withdrawn = await renter.gpu(['wallet', 'withdraw', walletId, '--amount', '1.5', '--to', provider.id]);
    expect(withdrawn.code).toBe(1);
    expect(withdrawn.stderr).toMatch(/^gpu: [A-Z_]+: [^\n]+\n$/);
    // Amounts are decimal strings: a number billing would not read is a usage error, nothing sent.
    expect((await renter.gpu(['wallet', 'withdraw', walletId, '--amount', '1e3'])).code).toBe(2);
    expect((await renter.gpu(['wallet', 'withdraw', walletId])).code).toBe(2);
    // A deposit's options that do nothing on their own: usage errors.
    expect(await renter.gpu(['wallet', 'deposit', walletId, '--amount', '5'])).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('--amount is what --keypair sends'),
    });
    expect(await renter.gpu(['wallet', 'deposit', walletId, '--rpc', 'http://127.0.0.1:1'])).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('--rpc is the chain --keypair sends through'),
    });
    expect(await renter.gpu(['sessions', '--status', 'done'])).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('done is not one of active'),
    });
    expect((await renter.gpu(['sessions', '--status', 'completed,terminated'])).code).toBe(0);
  });

  it("shows the platform's rates, what storing objects cost, and the chain balance only where billing has a chain", async () => {
    // The rate card as billing answers it; the table names each rate.
    const card = (await rig.billing.app.inject({ method: 'GET', url: '/api/v1/pricing/rates' })).json();
    expect(answer(await renter.gpu(['rates', '--json']))).toEqual(card);
    const rates = await renter.gpu(['rates']);
    expect(rates.stdout).toMatch(
      new RegExp(`per GPU-hour: nvidia-tesla-h100 +│ ${card.base_rates['nvidia-tesla-h100']}`),
    );
    expect(rates.stdout).toMatch(/storage, per GB-hour +│ 0\.000100 \(your charges: gpu storage usage\)/);

    // Two hours of the renter's objects charged, reported as the storage service reports them (a service client).
    const storageService = await rig.platform.machineClient('service');
    const hourEnding = (iso: string) => ({
      period_start: new Date(Date.parse(iso) - 3_600_000).toISOString(),
      period_end: iso,
    });
    for (const [at, bytes] of [
      ['2026-10-01T01:00:00.000Z', 5 * 2 ** 30],
      ['2026-10-02T01:00:00.000Z', 3 * 2 ** 20],
    ] as const) {
      const charged = await rig.billing.app.inject({
        method: 'POST',
        url: '/api/v1/billing/storage-usage',
        headers: { authorization: `Bearer ${await storageService.get()}` },
        payload: { user_id: renter.id, ...hourEnding(at), bytes },
      });
      expect(charged.statusCode, charged.body).toBe(201);
    }
    const charges = answer(await renter.gpu(['storage', 'usage', '--json']));
    expect(charges).toMatchObject([
      { period_end: '2026-10-02T01:00:00.000Z', bytes: 3 * 2 ** 20, cost: '0.000000' },
      {
        period_end: '2026-10-01T01:00:00.000Z',
        bytes: 5 * 2 ** 30,
        gb_hours: '5',
        cost: '0.000500',
        unpaid: '0.000000',
      },
    ]);
    // Page after page, the same list; --from and --to bound the periods' starts; the table in words.
    expect(answer(await renter.gpu(['storage', 'usage', '--page-size', '1', '--json']))).toEqual(charges);
    expect(answer(await renter.gpu(['storage', 'usage', '--from', '2026-10-02', '--json']))).toEqual([charges[0]]);
    expect(answer(await renter.gpu(['storage', 'usage', '--to', '2026-10-01T12:00:00+02:00', '--json']))).toEqual([
      charges[1],
    ]);
    const table = await renter.gpu(['storage', 'usage']);
    expect(table.stdout).toMatch(
      /2026-10-01T00:00:00Z.*2026-10-01T01:00:00Z.*5\.0 GB.*│ 5 +│ 0\.000100 +│ 0\.000500 +│ 0\.000500/,
    );
    expect(table.stdout).toContain('3.0 MB');
    expect(await renter.gpu(['storage', 'usage', '--from', '2027-01-01'])).toMatchObject({
      code: 0,
      stdout: '',
      stderr: 'no storage charges (in those periods)\n',
    });
    // Another user's charges are not the renter's to read; a date that is none is a usage error, nothing asked.
    refused(await renter.gpu(['storage', 'usage', '--user', provider.id]), 'NOT_WALLET_HOLDER');
    expect(answer(await provider.gpu(['storage', 'usage', '--json']))).toEqual([]);
    for (const bad of ['2026-02-30', '2026-02-30T12:00:00Z', 'yesterday', '2026-10-01T12:00:00', '2100-01-01']) {
      const r = await renter.gpu(['storage', 'usage', '--from', bad]);
      expect(r, bad).toMatchObject({ code: 2, stderr: expect.stringContaining('--from takes a date (2026-11-01)') });
    }

    // This platform's billing has no chain: --chain is refused, the balance without it answers.
    refused(await renter.gpu(['wallet', 'balance', walletId, '--chain']), 'SOLANA_NOT_CONFIGURED');
    expect(answer(await renter.gpu(['wallet', 'balance', walletId, '--json']))).toMatchObject({ wallet_id: walletId });
  });

  it("serves the provider: its machines, the machine's rates set and shown, its earnings, a payout asked for", async () => {
    const machines = answer(await provider.gpu(['machines', '--json']));
    expect(machines.map((m: { id: string }) => m.id)).toEqual([machineId]);
    expect((await provider.gpu(['machines'])).stdout).toContain('8 × NVIDIA H100 80GB HBM3');
    refused(await renter.gpu(['machines']), 'ROLE_REQUIRED');

    // The sessions above paid the machine.
    const one = answer(await provider.gpu(['earnings', machineId, '--json']));
    expect(one).toMatchObject({ provider_id: machineId });
    expect(Number(one.total_earned)).toBeGreaterThan(0);
    expect(answer(await provider.gpu(['earnings', '--json']))).toEqual([one]);
    refused(await renter.gpu(['earnings', machineId]), 'ROLE_REQUIRED');
    // Paid out on chain, which this platform has none of (and only to a verified e-mail address): one line.
    refused(await provider.gpu(['payout', machineId, '--amount', '0.5']), '[A-Z_]+');
    expect((await provider.gpu(['payout', machineId, '--amount', '-1'])).code).toBe(2);
    // All that is available, under the minimum here: the hint names the machine's earnings, not a wallet deposit
    // (the provider's address verified first: payouts need it).
    const verified = await provider.gpu(['email', 'verify'], {
      env: { GPU_EMAIL_CODE: await verificationCode(provider) },
    });
    expect(verified.code, verified.stderr).toBe(0);
    expect(Number(one.available_for_payout)).toBeLessThan(Number(one.minimum_payout));
    const short = await provider.gpu(['provider', 'payout', machineId]);
    expect(short.code).toBe(1);
    expect(short.stderr).toMatch(
      new RegExp(`^gpu: INSUFFICIENT_FUNDS: .*\\(gpu provider earnings ${machineId} shows what is available`),
    );
    // The automatic payout: shown off; turned on it would pay on chain, which this platform has none of: one line.
    const auto = answer(await provider.gpu(['provider', 'payout-settings', machineId, '--json']));
    expect(auto).toMatchObject({ provider_id: machineId, auto_payout: false, destination: null });
    expect((await provider.gpu(['provider', 'payout-settings', machineId])).stdout).toMatch(
      /automatic payout[\s│]+off\b/,
    );
    refused(await provider.gpu(['provider', 'payout-settings', machineId, '--auto', 'on']), '[A-Z_]+');
    for (const bad of [
      ['--auto', 'yes'],
      ['--to', '11111111111111111111111111111112'],
      ['--auto', 'off', '--to', 'x'],
    ]) {
      const r = await provider.gpu(['provider', 'payout-settings', machineId, ...bad]);
      expect(r, bad.join(' ')).toMatchObject({ code: 2, stdout: '' });
    }
    refused(await renter.gpu(['provider', 'payout-settings', machineId, '--auto', 'off']), 'ROLE_REQUIRED');

    const none = answer(await provider.gpu(['rates', 'show', machineId, '--json']));
    expect(none).toMatchObject({ base_rates: {}, updated_at: null });
    const set = await provider.gpu(['rates', 'set', machineId, '--base', 'H100=3.5', '--vram-rate', '0', '--json']);
    expect(set.code, set.stderr).toBe(0);
    expect(JSON.parse(set.stdout)).toMatchObject({
      base_rates: { 'nvidia-tesla-h100': '3.5' },
      vram_rate_per_gb_hour: '0',
    });
    const shown = await provider.gpu(['rates', 'show', machineId]);
    expect(shown.stdout).toContain('3.5');
    expect(shown.stdout).toContain('none (takes no bids)');
    refused(await renter.gpu(['rates', 'set', machineId, '--base', 'H100=1']), 'ROLE_REQUIRED');
    // A pair without its model (a bare rate) is a usage error, never a rate for a model named by its digits.
    for (const pair of ['H100', '2.5', '25', '=2.5']) {
      expect((await provider.gpu(['rates', 'set', machineId, '--base', pair])).code, pair).toBe(2);
    }

    // Bids: none taken until the owner sets a floor; then a bid under it is refused, one at it rents at the bid.
    refused(await renter.gpu(['rent', ...rental(), '--bid', '1']), 'BIDS_NOT_ACCEPTED');
    // Only the floor named: the rates set before are kept.
    const floor = await provider.gpu(['rates', 'set', machineId, '--bid-floor', '0.5']);
    expect(floor.stdout).toMatch(/bid floor\s*│\s*0\.5 per GPU-hour/);
    expect(floor.stdout).toMatch(/per GPU-hour: nvidia-tesla-h100\s*│\s*3\.5/);
    refused(await renter.gpu(['rent', ...rental(), '--bid', '0.4']), 'BID_BELOW_FLOOR');
    const bid = await renter.gpu(['rent', ...rental(), '--gpus', '2', '--bid', '0.5']);
    expect(bid.code, bid.stderr).toBe(0);
    expect(bid.stdout).toMatch(/per hour\s*│\s*1\.000000/);
    expect(bid.stdout).toMatch(/interruptible\s*│\s*at a bid of 0\.500000 per GPU-hour/);
    const bidId = /session\s*│\s*([0-9a-f-]{36})/.exec(bid.stdout)?.[1];
    // A running bid is raised: the session's bid and hourly rate move; under the floor is refused; the provider may
    // not change the renter's bid.
    const raised = await renter.gpu(['bid', bidId!, '--price', '0.75']);
    expect(raised.code, raised.stderr).toBe(0);
    expect(raised.stdout).toMatch(/bid per GPU-hour\s*│\s*0\.750000/);
    expect(raised.stdout).toMatch(/per hour\s*│\s*1\.500000/);
    refused(await renter.gpu(['bid', bidId!, '--price', '0.1']), 'BID_BELOW_FLOOR');
    refused(await provider.gpu(['bid', bidId!, '--price', '2']), 'NOT_SESSION_RENTER');
    expect((await renter.gpu(['bid', bidId!])).code).toBe(2);
    expect(await renter.gpu(['bid', bidId!, '--price', '1e3'])).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('--price takes a decimal amount'),
    });
    expect((await renter.gpu(['end', bidId!])).code).toBe(0);

    // rates set changes what it names and keeps the rest; none puts the platform's back; --replace sets exactly what
    // it is given; nothing named is a usage error.
    const rates = async (args: string[]) => answer(await provider.gpu(['rates', 'set', machineId, ...args, '--json']));
    expect(await rates(['--base', 'A100=2'])).toMatchObject({
      base_rates: { 'nvidia-tesla-h100': '3.5', 'nvidia-tesla-a100': '2' },
      vram_rate_per_gb_hour: '0',
      bid_floor: '0.5',
    });
    const back = await rates(['--base', 'NVIDIA A100-SXM4-80GB=none', '--vram-rate', 'none', '--bid-floor', 'none']);
    expect(back).toMatchObject({ vram_rate_per_gb_hour: null, bid_floor: null });
    expect(back.base_rates).toEqual({ 'nvidia-tesla-h100': '3.5' });
    expect(await rates(['--power-rate', '0.001', '--vram-rate', '0.01'])).toMatchObject({
      base_rates: { 'nvidia-tesla-h100': '3.5' },
      power_rate_per_watt_hour: '0.001',
    });
    const replaced = await rates(['--replace', '--base', 'L40=1.25']);
    expect(replaced).toMatchObject({ vram_rate_per_gb_hour: null, power_rate_per_watt_hour: null, bid_floor: null });
    expect(replaced.base_rates).toEqual({ 'nvidia-tesla-l40': '1.25' });
    expect(await provider.gpu(['rates', 'set', machineId])).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('name a rate to change'),
    });
    expect((await provider.gpu(['rates', 'set', machineId, '--bid-floor', 'never'])).code).toBe(2);
    // A pair billing would not read is a usage error before anything is asked (of a machine not there, too).
    const nowhere = '00000000-0000-4000-8000-000000000000';
    expect((await provider.gpu(['rates', 'set', nowhere, '--base', 'H100=cheap'])).code).toBe(2);
  });

  it('lists and signs out devices, and changes the password read from standard input, never from the command line', async () => {
    const user = await signedIn(['renter']);
    // The sign-up's own sign-in (the test's, before gpu login) goes with every other device but this one.
    expect(answer(await user.gpu(['sign-ins', 'revoke', '--all', '--json']))).toEqual({ signed_out: 1 });
    const other = gpuAt(url, join(dir, `${user.id}-laptop`));
    expect((await other(['login', '--email', user.email], { env: { GPU_PASSWORD: user.password } })).code).toBe(0);
    const listed = answer(await user.gpu(['sign-ins', '--json']));
    expect(listed.map((s: { current: boolean }) => s.current)).toEqual([true, false]);
    expect((await user.gpu(['sign-ins', 'list'])).stdout).toContain(listed[1].id);
    expect((await user.gpu(['sign-ins', 'revoke', listed[1].id])).code).toBe(0);
    expect((await other(['whoami'])).code).toBe(1);
    expect((await user.gpu(['sign-ins', 'revoke'])).code).toBe(2);

    const third = gpuAt(url, join(dir, `${user.id}-phone`));
    expect((await third(['login', '--email', user.email], { env: { GPU_PASSWORD: user.password } })).code).toBe(0);
    expect(answer(await user.gpu(['sign-ins', 'revoke', '--all', '--json']))).toEqual({ signed_out: 1 });
    expect((await third(['whoami'])).code).toBe(1);
    expect((await user.gpu(['whoami'])).code).toBe(0);

    const next = 'a new and longer passphrase';
    const wrong = await user.gpu(['password', 'change'], { input: `not the password\n${next}\n` });
    refused(wrong, 'INVALID_CREDENTIALS');
    const changed = await user.gpu(['password', 'change'], { input: `${user.password}\n${next}\n` });
    expect(changed.code, changed.stderr).toBe(0);
    expect(changed.stdout + changed.stderr).not.toContain(next);
    // This device stays signed in; a sign-in with the old password is refused, with the new one it works.
    expect((await user.gpu(['whoami'])).code).toBe(0);
    refused(await other(['login', '--email', user.email], { input: `${user.password}\n` }), 'INVALID_CREDENTIALS');
    expect((await other(['login', '--email', user.email], { env: { GPU_PASSWORD: next } })).code).toBe(0);
    expect((await user.gpu(['password', 'change'], { env: { GPU_PASSWORD: next } })).code).toBe(2);
  });

  it('verifies the address signed in, changing nothing else; not signed in, with a new password that ends the rest', async () => {
    const user = await signedIn(['renter']);
    const verified = await user.gpu(['email', 'verify', '--json'], {
      env: { GPU_EMAIL_CODE: await verificationCode(user) },
    });
    expect(answer(verified)).toMatchObject({ email: user.email, email_verified: true });
    expect((await user.gpu(['whoami'])).code).toBe(0);
    // Where nobody is signed in, the code and a new password from standard input make the account the reader's alone.
    const mailbox = gpuAt(url, join(dir, `${user.id}-mailbox`));
    const next = 'the mailbox reader chose this one';
    const claimed = await mailbox(['email', 'verify'], { input: `${await verificationCode(user)}\n${next}\n` });
    expect(claimed.code, claimed.stderr).toBe(0);
    expect(claimed.stdout).toMatch(/everything made before ended: gpu login/);
    expect(claimed.stdout + claimed.stderr).not.toContain(next);
    expect((await user.gpu(['whoami'])).code).toBe(1);
    refused(await mailbox(['login', '--email', user.email], { input: `${user.password}\n` }), 'INVALID_CREDENTIALS');
    expect((await mailbox(['login', '--email', user.email], { env: { GPU_PASSWORD: next } })).code).toBe(0);
  });

  it('shows a progress bar for a large copy on a terminal only', async () => {
    const big = join(dir, 'big.bin');
    writeFileSync(big, Buffer.alloc(3 * 1024 * 1024, 7));
    const env = { ...process.env, GPU_URL: url, GPU_CONFIG_DIR: join(dir, renter.id) };
    // `script` gives the command a terminal (standard error included) and prints what it showed there.
    const onTerminal = async (args: string[]) => {
      const line = gpuCommandLine(args)
        .map((a) => `'${a}'`)
        .join(' ');
      return (await run('script', ['-qec', line, '/dev/null'], { cwd: root, env })).stdout;
    };
    const up = await onTerminal(['storage', 'cp', big, 'gpu:big.bin']);
    expect(up).toMatch(/\[#+\] 100% \| 3\.0\/3\.0 MiB/);
    const back = join(dir, 'big-back.bin');
    const down = await onTerminal(['storage', 'cp', 'gpu:big.bin', back]);
    expect(down).toMatch(/\[#+\] 100% \| 3\.0\/3\.0 MiB/);
    expect(readFileSync(back).equals(readFileSync(big))).toBe(true);
    // Not on a terminal (nor with --json on one): no bar.
    const piped = await renter.gpu(['storage', 'cp', big, 'gpu:big.bin']);
    expect(piped.code).toBe(0);
    expect(piped.stderr).toBe('');
    expect(await onTerminal(['storage', 'cp', big, 'gpu:big.bin', '--json'])).not.toContain('%');
  });

  it('uploads a large file in parts and, killed mid-way, resumes it where it stopped', async () => {
    const big = join(dir, 'resume.bin');
    const bytes = randomBytes(100 * 1024 * 1024);
    writeFileSync(big, bytes);
    const configDir = join(dir, renter.id);
    const call = (path: string) =>
      fetch(`${url}${path}`, { headers: { authorization: `Bearer ${renter.token}` } }).then((r) => r.json());
    // The first run is killed (no chance to clean up) once the service holds a part of its upload.
    const [node, ...args] = gpuCommandLine(['storage', 'cp', big, 'gpu:models/resume.bin']);
    const first = spawn(node!, args, {
      cwd: root,
      env: { ...process.env, GPU_URL: url, GPU_CONFIG_DIR: configDir },
      stdio: 'ignore',
    });
    const exited = new Promise((resolve) => first.once('exit', resolve));
    let held = 0;
    for (const started = Date.now(); held === 0 && Date.now() - started < 60_000; ) {
      const uploads = (await call('/uploads')) as Array<{ upload_id: string }>;
      if (uploads[0]) held = ((await call(`/uploads/${uploads[0].upload_id}`)) as { parts: unknown[] }).parts.length;
      if (held === 0) await new Promise((r) => setTimeout(r, 20));
    }
    first.kill('SIGKILL');
    await exited;
    expect(held).toBeGreaterThan(0);
    const pending = JSON.parse(readFileSync(join(configDir, 'uploads.json'), 'utf8'));
    expect(Object.keys(pending)).toHaveLength(1);

    const again = await renter.gpu(['storage', 'cp', big, 'gpu:models/resume.bin', '--json']);
    expect(again.code, again.stderr).toBe(0);
    const resumed = /resuming upload \S+: (\d+) of 7 parts already stored/.exec(again.stderr);
    expect(resumed, again.stderr).not.toBeNull();
    expect(Number(resumed?.[1])).toBeGreaterThanOrEqual(held);
    expect(JSON.parse(again.stdout)).toMatchObject({ key: 'models/resume.bin', size: bytes.length });
    const back = join(dir, 'resume-back.bin');
    expect((await renter.gpu(['storage', 'cp', 'gpu:models/resume.bin', back])).code).toBe(0);
    expect(readFileSync(back).equals(bytes)).toBe(true);
    // Nothing left under way, here or at the service.
    expect(JSON.parse(readFileSync(join(configDir, 'uploads.json'), 'utf8'))).toEqual({});
    expect(await call('/uploads')).toEqual([]);
  });
});
