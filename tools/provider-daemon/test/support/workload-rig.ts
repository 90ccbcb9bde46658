/**
 * A platform for the daemon's workload tests: the real auth service and registry, billing as the platform runs it
 * (and, with `storage`, the storage service on the tests' S3 server, trusted by billing for workloads' files), and
 * provider machines of 8 simulated GPUs whose daemons run workloads in the real bubblewrap sandbox.
 *
 *   const rig = useWorkloadRig({ storage: true });
 *   const m = await rig.machine();                       // attached; m.runner() runs its workloads
 *   const r = await rig.rent(m.providerId, 2, { command: ['true'], max_runtime_seconds: 60 });
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TokenSource } from '@gpu/client';
import { createLogger, NoopPublisher, UNCHECKED_PRINCIPAL } from '@gpu/common';
import { afterAll, beforeAll, expect } from 'vitest';
import { createClient } from '../../../../services/auth/src/domain/clients.ts';
import { registerAndLogin } from '../../../../services/auth/test/helpers.ts';
import { buildApp } from '../../../../services/billing/src/app.ts';
import { base58Encode } from '../../../../services/billing/src/domain/chain/base58.ts';
import { setProviderRates } from '../../../../services/billing/src/domain/pricing/index.ts';
import type { BillingHarness } from '../../../../services/billing/test/support/setup.ts';
import type { StorageConfig } from '../../../../services/storage/src/config.ts';
import { startService, type TestService } from '../../../../services/storage/test/helpers.ts';
import {
  type AuthAndRegistry,
  priceTheMarket,
  useAuthAndRegistry,
} from '../../../../tests/support/auth-and-registry.ts';
import { billingWithRegistry } from '../../../../tests/support/billing-with-registry.ts';
import { type DaemonConfig, daemonConfigSchema } from '../../src/config.ts';
import { ProviderDaemon } from '../../src/daemon.ts';
import { gpuSource } from '../../src/gpu/source.ts';
import { UsageReporter } from '../../src/usage.ts';
import { WorkloadRunner, type WorkloadRunnerDeps } from '../../src/workloads/runner.ts';

export interface Renter {
  id: string;
  headers: Record<string, string>;
}

export interface WorkloadRig {
  platform: AuthAndRegistry;
  billing: BillingHarness;
  /** With `storage`: the storage service, listening (its `url`). */
  storage: TestService;
  /** Where the machines' run directories are made. */
  dir: string;
  /**
   * A provider's daemon on a simulated 8-GPU machine (8 H100s of 80 GB, unless `machine.gpus` says), attached, and a
   * runner of its workloads (not polling yet). `machine.location`: its region in the market.
   */
  machine(
    workloads?: Record<string, unknown>,
    machine?: { location?: string; gpus?: { name: string; memory_total_mib: number }[] },
  ): Promise<{
    providerId: string;
    deps: WorkloadRunnerDeps;
    /** Its daemon: `heartbeat()` keeps the machine online in a long test. */
    daemon: ProviderDaemon;
    runner(): WorkloadRunner;
    runDir: string;
  }>;
  /**
   * A provider's daemon as a process of its own (`src/main.ts`, as a machine runs it) on a simulated 8-GPU machine,
   * heartbeating every second and running workloads; attached. `exited` settles when the process is gone.
   */
  daemonProcess(
    workloads?: Record<string, unknown>,
  ): Promise<{ providerId: string; child: ChildProcess; exited: Promise<unknown>; runDir: string }>;
  /** Ends the session as its renter does (`POST /api/v1/billing/end-session`): billing's answer. */
  endSession(
    headers: Record<string, string>,
    sessionId: string,
    // biome-ignore lint/suspicious/noExplicitAny: tests read JSON answers as the service wrote them
  ): Promise<{ statusCode: number; body: string; json(): any }>;
  /** A renter with a funded wallet. */
  renter(): Promise<Renter & { walletId: string }>;
  /**
   * Starts a session of `gpuCount` GPUs running `workload` (by a new renter unless one is given; `extra`: more of the
   * start's body, a `bid`); its answer.
   */
  start(
    providerId: string,
    gpuCount: number,
    workload: object,
    renter?: Renter & { walletId: string },
    extra?: Record<string, unknown>,
    // biome-ignore lint/suspicious/noExplicitAny: tests read JSON answers as the service wrote them
  ): Promise<{ statusCode: number; body: string; json(): any }>;
  /** The same, expecting 201: the renter's headers, the session's ID, GPUs and start. */
  rent(
    providerId: string,
    gpuCount: number,
    workload: object,
    renter?: Renter & { walletId: string },
  ): Promise<{ headers: Record<string, string>; userId: string; id: string; gpus: number[]; startedAt: string }>;
  /** The session's workload as its renter reads it. */
  // biome-ignore lint/suspicious/noExplicitAny: tests read JSON answers as the service wrote them
  workloadOf(headers: Record<string, string>, id: string): Promise<any>;
  /** Gives the registry the platform's prices, as billing announces them: the market lists machines once it has them. */
  priceTheMarket(): Promise<void>;
  /** The machine's owner lets it take bids (interruptible leases) from `floor` per GPU-hour, at billing's own rates. */
  takeBids(providerId: string, floor: string): Promise<void>;
  /**
   * Another billing instance on the rig's database and settings (a second replica behind the load balancer), listening:
   * its URL, and how to close it.
   */
  secondBilling(): Promise<{ url: string; close(): Promise<void> }>;
}

export function useWorkloadRig(
  opts: {
    /**
     * The storage service; with `objectStore`, settings of its object store (`public_endpoint`: where its presigned
     * URLs point).
     */
    storage?: boolean | { objectStore: Partial<StorageConfig['object_store']> };
    billing?: Record<string, unknown>;
    /**
     * The registry's own settings, whether its offline sweep runs and whether it publishes its status events on NATS
     * (`useAuthAndRegistry`).
     */
    registry?: { config?: Record<string, unknown>; sweeper?: boolean; nats?: boolean };
  } = {},
): WorkloadRig {
  const platform = useAuthAndRegistry({}, opts.registry ?? {});
  const processes: ChildProcess[] = [];
  const dir = mkdtempSync(join(tmpdir(), 'daemon-workloads-'));
  // The run directory's parents let the workloads' users through (as /var/lib would), listing nothing.
  chmodSync(dir, 0o711);
  const logger = createLogger({
    service: 'provider-daemon-test',
    instanceId: 't',
    level: process.env.DEBUG_LOG ? 'debug' : 'silent',
  });
  let billingUrl = '';

  type MachineShape = Parameters<WorkloadRig['machine']>[1];
  const config = (runDir: string, workloads: Record<string, unknown>, machine?: MachineShape): DaemonConfig =>
    daemonConfigSchema.parse(settings(runDir, workloads, machine));
  const settings = (runDir: string, workloads: Record<string, unknown>, machine: MachineShape = {}) => ({
    auth_url: platform.authUrl,
    registry_url: platform.registryUrl,
    billing_url: billingUrl,
    state_file: join(dir, `state-${randomUUID()}.json`),
    provider: {
      name: `rig-${randomUUID().slice(0, 8)}`,
      ...(machine.location ? { location: machine.location } : {}),
    },
    gpu: {
      source: 'simulated',
      simulated_gpus:
        machine.gpus ?? Array.from({ length: 8 }, () => ({ name: 'NVIDIA H100 80GB HBM3', memory_total_mib: 81559 })),
    },
    workloads: {
      run_dir: runDir,
      poll_interval: '200ms',
      stop_grace: '500ms',
      log_interval: '500ms',
      disk_mb: 64,
      memory_mb: 1024,
      ...workloads,
    },
  });

  const rig: WorkloadRig = {
    platform,
    dir,
    billing: undefined as unknown as BillingHarness,
    storage: undefined as unknown as TestService,
    async machine(workloads = {}, machine = {}) {
      const owner = await platform.providerUser();
      const token: TokenSource = await platform.machineClient('daemon', owner.id);
      const c = config(join(dir, `run-${randomUUID().slice(0, 8)}`), workloads, machine);
      const usage = new UsageReporter({ config: c, logger, token, publisher: new NoopPublisher() });
      const daemon = new ProviderDaemon({ config: c, logger, gpus: gpuSource(c.gpu), token, usage });
      const providerId = await daemon.attach();
      const deps: WorkloadRunnerDeps = {
        config: c,
        logger,
        token,
        gpus: gpuSource(c.gpu),
        providerId: () => providerId,
        sessions: (id: string) => usage.runningSessions(id),
      };
      return { providerId, deps, daemon, runner: () => new WorkloadRunner(deps), runDir: c.workloads.run_dir };
    },
    async daemonProcess(workloads = {}) {
      const owner = await platform.providerUser();
      const { client, secret } = await createClient(platform.auth.ctx, UNCHECKED_PRINCIPAL, {
        name: `rig-daemon-${randomUUID().slice(0, 8)}`,
        role: 'daemon',
        owner_id: owner.id,
      });
      const runDir = join(dir, `run-${randomUUID().slice(0, 8)}`);
      const given = settings(runDir, workloads);
      const file = join(dir, `daemon-${randomUUID()}.json`);
      writeFileSync(
        file,
        JSON.stringify({
          ...given,
          log_level: process.env.DEBUG_LOG ? 'debug' : 'warn',
          heartbeat_interval: '1s',
          credentials: { client_id: client.id, client_secret: secret },
        }),
        { mode: 0o600 },
      );
      const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
        cwd: join(import.meta.dirname, '../..'),
        env: { ...process.env, DAEMON_CONFIG_FILE: file },
        stdio: ['ignore', 'inherit', 'inherit'],
      });
      processes.push(child);
      const exited = once(child, 'exit');
      const end = Date.now() + 30_000;
      for (;;) {
        try {
          const state = JSON.parse(readFileSync(given.state_file, 'utf8')) as { provider_id?: string };
          if (state.provider_id) return { providerId: state.provider_id, child, exited, runDir };
        } catch {}
        if (Date.now() > end || child.exitCode !== null) throw new Error('the daemon did not attach to its machine');
        await new Promise((r) => setTimeout(r, 100));
      }
    },
    async renter() {
      const { user, tokens } = await registerAndLogin(platform.auth.app, { roles: ['renter'] });
      const headers = { authorization: `Bearer ${tokens.access_token}` };
      const wallet = await rig.billing.app.inject({
        method: 'POST',
        url: '/api/v1/wallet',
        headers,
        payload: { owner_type: 'user', owner_id: user.id, solana_address: base58Encode(randomBytes(32)) },
      });
      await rig.billing.credit(wallet.json().id, '100');
      return { id: user.id as string, headers, walletId: wallet.json().id as string };
    },
    async start(providerId, gpuCount, workload, renter, extra = {}) {
      const who = renter ?? (await rig.renter());
      return rig.billing.app.inject({
        method: 'POST',
        url: '/api/v1/billing/start-session',
        headers: who.headers,
        payload: {
          user_id: who.id,
          wallet_id: who.walletId,
          provider_id: providerId,
          job_id: randomUUID(),
          gpu_model: 'H100',
          gpu_count: gpuCount,
          requested_vram_mb: 0,
          estimated_power_w: 0,
          accepted_hourly_rate: '100',
          workload,
          ...extra,
        },
      });
    },
    async rent(providerId, gpuCount, workload, renter) {
      const who = renter ?? (await rig.renter());
      const started = await rig.start(providerId, gpuCount, workload, who);
      expect(started.statusCode, started.body).toBe(201);
      const session = started.json().session;
      return {
        headers: who.headers,
        userId: who.id,
        id: session.id as string,
        gpus: session.gpu_indices as number[],
        startedAt: session.started_at as string,
      };
    },
    endSession: (headers, sessionId) =>
      rig.billing.app.inject({
        method: 'POST',
        url: '/api/v1/billing/end-session',
        headers,
        payload: { session_id: sessionId },
      }),
    async workloadOf(headers, id) {
      return (await rig.billing.app.inject({ url: `/api/v1/billing/sessions/${id}/workload`, headers })).json();
    },
    // Billing's own card: the market's prices are what billing charges.
    priceTheMarket: () => priceTheMarket(platform, rig.billing.ctx.pricing.card),
    async takeBids(providerId, floor) {
      await setProviderRates(rig.billing.ctx, UNCHECKED_PRINCIPAL, providerId, {
        baseRates: {},
        vramRatePerGbHour: null,
        powerRatePerWattHour: null,
        bidFloor: floor,
      });
    },
    async secondBilling() {
      const second = await buildApp({
        config: { ...rig.billing.config, instance_id: 'second-instance' },
        logger: createLogger({ service: 'billing', instanceId: 'second-instance', level: 'silent' }),
        db: rig.billing.db,
        chain: null,
      });
      return { url: await second.listen({ host: '127.0.0.1', port: 0 }), close: () => second.close() };
    },
  };

  beforeAll(async () => {
    if (opts.storage) {
      rig.storage = await startService({
        listen: true,
        ...(typeof opts.storage === 'object' ? { objectStore: opts.storage.objectStore } : {}),
        settings: {
          access: {
            jwks_url: `${platform.authUrl}/.well-known/jwks.json`,
            issuer: platform.auth.config.jwt.issuer,
            audience: platform.auth.config.jwt.audience,
          },
        },
      });
    }
    rig.billing = await billingWithRegistry(platform, {
      config: { ...(opts.storage ? { storage: { url: rig.storage.url } } : {}), ...(opts.billing ?? {}) },
    });
    billingUrl = await rig.billing.app.listen({ host: '127.0.0.1', port: 0 });
  });
  afterAll(async () => {
    for (const child of processes) child.kill('SIGKILL');
    await rig.billing?.close();
    await rig.storage?.close();
    // A daemon killed with SIGKILL leaves its workloads' filesystems mounted (its next life would take them up).
    for (const line of readFileSync('/proc/self/mounts', 'utf8').split('\n')) {
      const at = line.split(' ')[1];
      if (at?.startsWith(`${dir}/`)) spawnSync('umount', ['-l', at]);
    }
    rmSync(dir, { recursive: true, force: true });
  });
  return rig;
}

/**
 * Reads until `done` says yes (or `ms` passed): the last value read. Generous by default, as it costs nothing when
 * `done` comes, and a busy machine can be slow.
 */
export async function until<T>(read: () => Promise<T>, done: (v: T) => boolean, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await read();
    if (done(v) || Date.now() > end) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
}
