/**
 * A daemon that stops cleanly takes its machine out of the market at once: the daemon runs as a process against the
 * real auth service, the real provider registry (publishing its status events on NATS) and billing (asking that
 * registry, reading its events as the platform's billing does). Stopped with Ctrl-C (SIGINT) or SIGTERM, it marks the
 * machine offline before it exits, and says so in its log: the offers drop the machine the moment the process is gone
 * (not after the registry's 90 s offline bound), and billing ends the session running on it, as an offline machine's.
 */
import type { ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connectPublisher, createLogger, type NatsPublisher, UNCHECKED_PRINCIPAL } from '@gpu/common';
import { testEnv } from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient } from '../../../services/auth/src/domain/clients.ts';
import { startRegistryEventsConsumer } from '../../../services/billing/src/adapters/registry-events-consumer.ts';
import type { BillingHarness } from '../../../services/billing/test/support/setup.ts';
import { priceTheMarket, useAuthAndRegistry } from '../../../tests/support/auth-and-registry.ts';
import { billingWithRegistry } from '../../../tests/support/billing-with-registry.ts';
import { rentAtBilling } from '../../../tests/support/rent.ts';
import { startDaemonProcess, until } from './support/daemon-process.ts';

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

/** A daemon process on a simulated two-GPU machine in a region of its own; its log lines are collected. */
async function startDaemon() {
  const owner = await platform.providerUser();
  const { client, secret } = await createClient(platform.auth.ctx, UNCHECKED_PRINCIPAL, {
    name: `rig-daemon-${randomUUID().slice(0, 8)}`,
    role: 'daemon',
    owner_id: owner.id,
  });
  const region = `stop-${randomUUID().slice(0, 8)}`;
  const h100 = { name: 'NVIDIA H100 80GB HBM3', memory_total_mib: 81559, power_limit_w: 700, power_draw_w: 610 };
  const daemon = await startDaemonProcess(dir, {
    auth_url: platform.authUrl,
    registry_url: platform.registryUrl,
    billing_url: billingUrl,
    credentials: { client_id: client.id, client_secret: secret },
    provider: { name: `rig-${randomUUID().slice(0, 8)}`, location: region },
    heartbeat_interval: '1s',
    gpu: { source: 'simulated', simulated_gpus: [h100, h100] },
    workloads: { enabled: false },
  });
  running.push(daemon.child);
  return { ...daemon, region };
}

/** The machines the market offers in `region`. */
async function offeredIn(region: string): Promise<string[]> {
  const res = await platform.registry.app.inject({ url: `/offers?region=${region}`, headers: await asPlatform() });
  expect(res.statusCode).toBe(200);
  return (res.json() as { provider_id: string }[]).map((o) => o.provider_id);
}

const sessionOf = (id: string) =>
  billing.db.selectFrom('rental_sessions').selectAll().where('id', '=', id).executeTakeFirstOrThrow();

describe('a daemon stopped cleanly', () => {
  it('marks its machine offline on Ctrl-C before it exits: offers drop it at once, its session ends', {
    timeout: 90_000,
  }, async () => {
    const daemon = await startDaemon();
    // Two GPUs, one rented: the machine stays on the market with the other.
    const sessionId = (await rentAtBilling(platform, billing, daemon.providerId)).id;
    expect(
      await until(
        () => offeredIn(daemon.region),
        (o) => o.includes(daemon.providerId),
        30_000,
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
      30_000,
    );
    expect(ended).toMatchObject({ status: 'terminated', end_reason: 'provider_offline' });
  });

  it('does so on SIGTERM too', { timeout: 90_000 }, async () => {
    const daemon = await startDaemon();
    expect(
      await until(
        () => offeredIn(daemon.region),
        (o) => o.includes(daemon.providerId),
        30_000,
      ),
    ).toContain(daemon.providerId);
    daemon.child.kill('SIGTERM');
    expect(await daemon.exited).toBe(0);
    expect(await offeredIn(daemon.region)).toEqual([]);
    expect(daemon.log.some((l) => l.includes('machine marked offline'))).toBe(true);
  });
});
