/**
 * A daemon that stops cleanly takes its machine out of the market at once: the daemon runs as a process against the
 * real auth service, the real provider registry (publishing its status events on NATS) and billing (asking that
 * registry, reading its events as the platform's billing does). Stopped with Ctrl-C (SIGINT) or SIGTERM, it marks the
 * machine offline before it exits, and says so in its log: the offers drop the machine the moment the process is gone
 * (not after the registry's 90 s offline bound), and billing ends the session running on it, as an offline machine's.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connectPublisher, createLogger, type NatsPublisher, UNCHECKED_PRINCIPAL } from '@gpu/common';
import { testEnv } from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient } from '../../../services/auth/src/domain/clients.ts';
import { registerAndLogin } from '../../../services/auth/test/helpers.ts';
import { startRegistryEventsConsumer } from '../../../services/billing/src/adapters/registry-events-consumer.ts';
import { base58Encode } from '../../../services/billing/src/domain/chain/base58.ts';
import type { BillingHarness } from '../../../services/billing/test/support/setup.ts';
import { priceTheMarket, useAuthAndRegistry } from '../../../tests/support/auth-and-registry.ts';
import { billingWithRegistry } from '../../../tests/support/billing-with-registry.ts';

const platform = useAuthAndRegistry({}, { nats: true });
const dir = mkdtempSync(join(tmpdir(), 'daemon-stop-'));
const logger = createLogger({ service: 'provider-daemon-test', instanceId: 't', level: 'silent' });
let billing: BillingHarness;
let billingUrl: string;
let nats: NatsPublisher;
let stopEvents: (() => Promise<void>) | undefined;
const running: ChildProcess[] = [];
/** A platform service's token from the auth service (the registry here trusts auth's keys). */
let asPlatform: () => Promise<Record<string, string>>;

beforeAll(async () => {
  billing = await billingWithRegistry(platform);
  billingUrl = await billing.app.listen({ host: '127.0.0.1', port: 0 });
  nats = (await connectPublisher({
    url: testEnv.natsUrl,
    credentials: testEnv.natsCredentials,
    name: 'daemon-stop-test',
  })) as NatsPublisher;
  // Billing hears of the registry's status changes as the platform's does: its consumer of the registry's events.
  const events = startRegistryEventsConsumer({
    connection: nats.connection,
    ctx: billing.ctx,
    subject: platform.registry.subject,
    durable: `billing-provider-status-${randomUUID().slice(0, 8)}`,
    logger,
  });
  stopEvents = () => events.stop();
  const service = await platform.machineClient('service');
  asPlatform = async () => ({ authorization: `Bearer ${await service.get()}` });
  await priceTheMarket(platform);
});
afterAll(async () => {
  for (const child of running) child.kill('SIGKILL');
  await stopEvents?.();
  await nats?.close();
  await billing?.close();
  rmSync(dir, { recursive: true, force: true });
});

async function until<T>(read: () => Promise<T>, done: (v: T) => boolean, ms: number): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await read();
    if (done(v) || Date.now() > end) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A daemon process on a simulated two-GPU machine in a region of its own; its log lines are collected. */
async function startDaemon() {
  const owner = await platform.providerUser();
  const { client, secret } = await createClient(platform.auth.ctx, UNCHECKED_PRINCIPAL, {
    name: `rig-daemon-${randomUUID().slice(0, 8)}`,
    role: 'daemon',
    owner_id: owner.id,
  });
  const region = `stop-${randomUUID().slice(0, 8)}`;
  const stateFile = join(dir, `state-${randomUUID()}.json`);
  const configFile = join(dir, `daemon-${randomUUID()}.json`);
  const h100 = { name: 'NVIDIA H100 80GB HBM3', memory_total_mib: 81559, power_limit_w: 700, power_draw_w: 610 };
  writeFileSync(
    configFile,
    JSON.stringify({
      log_level: 'info',
      auth_url: platform.authUrl,
      registry_url: platform.registryUrl,
      billing_url: billingUrl,
      credentials: { client_id: client.id, client_secret: secret },
      state_file: stateFile,
      provider: { name: `rig-${randomUUID().slice(0, 8)}`, location: region },
      heartbeat_interval: '1s',
      gpu: { source: 'simulated', simulated_gpus: [h100, h100] },
      workloads: { enabled: false },
    }),
    { mode: 0o600 },
  );
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
    cwd: join(import.meta.dirname, '..'),
    env: { ...process.env, DAEMON_CONFIG_FILE: configFile },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  running.push(child);
  const log: string[] = [];
  let partial = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    const lines = (partial + chunk.toString()).split('\n');
    partial = lines.pop() ?? '';
    log.push(...lines);
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const providerId = await until(
    async () => {
      try {
        return (JSON.parse(readFileSync(stateFile, 'utf8')) as { provider_id?: string }).provider_id;
      } catch {
        return undefined;
      }
    },
    (id) => id !== undefined,
    30_000,
  );
  if (!providerId) throw new Error('the daemon did not attach to its machine');
  return { child, log, exited, providerId, region };
}

/** The machines the market offers in `region`. */
async function offeredIn(region: string): Promise<string[]> {
  const res = await platform.registry.app.inject({ url: `/offers?region=${region}`, headers: await asPlatform() });
  expect(res.statusCode).toBe(200);
  return (res.json() as { provider_id: string }[]).map((o) => o.provider_id);
}

/** A renter of the real auth service renting one of the machine's GPUs at billing; the session's ID. */
async function rentOne(providerId: string): Promise<string> {
  const { user, tokens } = await registerAndLogin(platform.auth.app, { roles: ['renter'] });
  const headers = { authorization: `Bearer ${tokens.access_token}` };
  const wallet = await billing.app.inject({
    method: 'POST',
    url: '/api/v1/wallet',
    headers,
    payload: { owner_type: 'user', owner_id: user.id, solana_address: base58Encode(randomBytes(32)) },
  });
  await billing.credit(wallet.json().id, '100');
  const started = await billing.app.inject({
    method: 'POST',
    url: '/api/v1/billing/start-session',
    headers,
    payload: {
      user_id: user.id,
      wallet_id: wallet.json().id,
      provider_id: providerId,
      job_id: randomUUID(),
      gpu_model: 'H100',
      gpu_count: 1,
      requested_vram_mb: 0,
      estimated_power_w: 0,
      accepted_hourly_rate: '100',
    },
  });
  expect(started.statusCode, started.body).toBe(201);
  return started.json().session.id as string;
}

const sessionOf = (id: string) =>
  billing.db.selectFrom('rental_sessions').selectAll().where('id', '=', id).executeTakeFirstOrThrow();

describe('a daemon stopped cleanly', () => {
  it('marks its machine offline on Ctrl-C before it exits: offers drop it at once, its session ends', {
    timeout: 90_000,
  }, async () => {
    const daemon = await startDaemon();
    // Two GPUs, one rented: the machine stays on the market with the other.
    const sessionId = await rentOne(daemon.providerId);
    expect(
      await until(
        () => offeredIn(daemon.region),
        (o) => o.includes(daemon.providerId),
        15_000,
      ),
    ).toContain(daemon.providerId);

    daemon.child.kill('SIGINT');
    expect(await daemon.exited).toBe(0);
    // The moment the process is gone, the machine is off the market.
    expect(await offeredIn(daemon.region)).toEqual([]);
    const machine = await platform.registry.app.inject({
      url: `/providers/${daemon.providerId}`,
      headers: await asPlatform(),
    });
    expect(machine.json().status).toBe('offline');
    expect(daemon.log.some((l) => l.includes('machine marked offline'))).toBe(true);
    // Billing ends the running session as an offline machine's, promptly (the offline bound would take 90 s).
    const ended = await until(
      () => sessionOf(sessionId),
      (s) => s.status === 'terminated',
      20_000,
    );
    expect(ended).toMatchObject({ status: 'terminated', end_reason: 'provider_offline' });
  });

  it('does so on SIGTERM too', { timeout: 90_000 }, async () => {
    const daemon = await startDaemon();
    expect(
      await until(
        () => offeredIn(daemon.region),
        (o) => o.includes(daemon.providerId),
        15_000,
      ),
    ).toContain(daemon.providerId);
    daemon.child.kill('SIGTERM');
    expect(await daemon.exited).toBe(0);
    expect(await offeredIn(daemon.region)).toEqual([]);
    expect(daemon.log.some((l) => l.includes('machine marked offline'))).toBe(true);
  });
});
