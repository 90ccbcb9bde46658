/**
 * The daemon against the real auth service (its daemon client's token, EdDSA) and the real provider registry
 * (verifying through auth's JWKS), on a simulated machine: registration, heartbeats, restarts, lost state, changed
 * GPUs, a record deleted under it, and a registry it cannot reach.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TokenSource } from '@gpu/client';
import { connectPublisher, createLogger, type NatsPublisher } from '@gpu/common';
import { freePort, testEnv } from '@gpu/common/testing';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { decodeJwt } from 'jose';
import { afterAll, describe, expect, it } from 'vitest';
import { DedicatedNats } from '../../../services/provider-registry/test/dedicated-nats.ts';
import { providerBody } from '../../../services/provider-registry/test/helpers.ts';
import { useAuthAndRegistry } from '../../../tests/support/auth-and-registry.ts';
import { type DaemonConfig, daemonConfigSchema, loadDaemonConfig } from '../src/config.ts';
import { ProviderDaemon } from '../src/daemon.ts';
import { FULL_EVERY } from '../src/gpu/metric-changes.ts';
import type { GpuReading } from '../src/gpu/nvidia-smi.ts';
import { gpuSource } from '../src/gpu/source.ts';
import { natsHeartbeats } from '../src/heartbeats.ts';

const platform = useAuthAndRegistry({}, { nats: true, takeHeartbeats: true });
const dir = mkdtempSync(join(tmpdir(), 'daemon-'));
const logger = createLogger({ service: 'provider-daemon-test', instanceId: 't', level: 'silent' });
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A provider user and its daemon client's token source, made at the auth service. */
async function provider(): Promise<{ ownerId: string; token: TokenSource }> {
  const user = await platform.providerUser();
  return { ownerId: user.id, token: await platform.machineClient('daemon', user.id) };
}

function config(over: Record<string, unknown> = {}): DaemonConfig {
  return daemonConfigSchema.parse({
    auth_url: platform.authUrl,
    registry_url: platform.registryUrl,
    state_file: join(dir, `state-${Math.random()}.json`),
    provider: { name: 'rig-1', hostname: 'rig-1.example.net' },
    gpu: {
      source: 'simulated',
      simulated_gpus: [
        { name: 'NVIDIA H100 80GB HBM3', memory_total_mib: 81559, driver_version: '580.159.04', utilization_gpu: 42 },
      ],
    },
    ...over,
  });
}

const daemonWith = (c: DaemonConfig, token: TokenSource) =>
  new ProviderDaemon({ config: c, logger, gpus: gpuSource(c.gpu), token });

/** A platform service's token from the auth service (the registry here trusts auth's keys, not a test issuer). */
let service: TokenSource | undefined;
const asPlatform = async () => {
  service ??= await platform.machineClient('service');
  return { authorization: `Bearer ${await service.get()}` };
};
const record = async (id: string) =>
  platform.registry.app
    .inject({ url: `/providers/${id}`, headers: await asPlatform() })
    .then((r) => ({ status: r.statusCode, body: r.json() }));

describe('provider daemon', () => {
  it('registers the machine for its owner and heartbeats its metrics', async () => {
    const { ownerId, token } = await provider();
    const daemon = daemonWith(config(), token);
    const id = await daemon.attach();
    const before = (await record(id)).body;
    expect(before).toMatchObject({
      owner_id: ownerId,
      name: 'rig-1',
      gpus: [{ model_name: 'NVIDIA H100 80GB HBM3', vram: 81559, driver_version: '580.159.04' }],
      metadata: { gpu_source: 'simulated' },
      // The disk each workload gets, for the market.
      disk_mb: 102_400,
    });
    await new Promise((r) => setTimeout(r, 20));
    await daemon.heartbeat();
    const after = (await record(id)).body;
    expect(after.gpus[0].utilization_gpu).toBe(42);
    expect(new Date(after.last_seen_at).getTime()).toBeGreaterThan(new Date(before.last_seen_at).getTime());
  });

  it('re-attaches after a restart, by its state file or, when that is lost, by name: never a second record', async () => {
    const { token } = await provider();
    const c = config();
    const first = await daemonWith(c, token).attach();
    expect(await daemonWith(c, token).attach()).toBe(first);
    // Restarted with another disk allowance: the record says the new one.
    const bigger = { ...c, workloads: { ...c.workloads, disk_mb: 204_800 } };
    expect(await daemonWith(bigger, token).attach()).toBe(first);
    expect((await record(first)).body.disk_mb).toBe(204_800);
    rmSync(c.state_file);
    expect(await daemonWith(c, token).attach()).toBe(first);
    // Cut short or written over (a power loss before the atomic writes, another program): as lost, by name.
    for (const text of ['', 'null', '[1]', '{"provider_id": 7}']) {
      writeFileSync(c.state_file, text);
      expect(await daemonWith(c, token).attach(), JSON.stringify(text)).toBe(first);
      expect(JSON.parse(readFileSync(c.state_file, 'utf8'))).toEqual({ provider_id: first });
      expect(statSync(c.state_file).mode & 0o777).toBe(0o600);
    }
    const own = await platform.registry.app.inject({
      url: '/providers',
      headers: { authorization: `Bearer ${await token.get()}` },
    });
    expect((own.json() as { id: string }[]).map((p) => p.id)).toEqual([first]);
  });

  it('a daemon restarted with its state file states what changed on its record when it runs', async () => {
    const { token } = await provider();
    const c = config();
    const id = await daemonWith(c, token).attach();
    // Started again as a machine runs it (its state file names the record) with another disk and hostname.
    const changed = {
      ...c,
      provider: { ...c.provider, hostname: 'rig-1b.example.net' },
      workloads: { ...c.workloads, disk_mb: 204_800 },
    };
    const attached: string[] = [];
    const daemon = new ProviderDaemon({
      config: changed,
      logger,
      gpus: gpuSource(changed.gpu),
      token,
      onAttached: (p) => attached.push(p),
    });
    const running = daemon.run();
    try {
      const deadline = Date.now() + 30_000;
      let now = (await record(id)).body;
      while (now.disk_mb !== 204_800 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 50));
        now = (await record(id)).body;
      }
      expect(now).toMatchObject({ disk_mb: 204_800, hostname: 'rig-1b.example.net' });
      expect(attached).toEqual([id]);
    } finally {
      daemon.stop();
      await running;
    }
  });

  it('binds its machine to its own client, claims one bound to none, and will not run one bound to another', async () => {
    const { ownerId, token } = await provider();
    const clientOf = async (t: TokenSource) => decodeJwt(await t.get()).client_id as string;
    const registered = await daemonWith(config(), token).attach();
    expect((await record(registered)).body.daemon_client_id).toBe(await clientOf(token));

    // A machine of the owner registered without a daemon (bound to none): the daemon of that name claims it.
    const c = config({ provider: { name: `rig-${randomUUID().slice(0, 8)}` } });
    const unbound = await platform.registry.app.inject({
      method: 'POST',
      url: '/providers',
      headers: await asPlatform(),
      payload: providerBody({ owner_id: ownerId, name: c.provider.name }),
    });
    expect(unbound.json().daemon_client_id).toBeNull();
    expect(await daemonWith(c, token).attach()).toBe(unbound.json().id);
    expect((await record(unbound.json().id)).body.daemon_client_id).toBe(await clientOf(token));

    // Another daemon client of the same owner, on a machine of that name (its state lost): not its machine to run.
    const other = await platform.machineClient('daemon', ownerId);
    const elsewhere = config({ provider: c.provider });
    await expect(daemonWith(elsewhere, other).attach()).rejects.toThrow(/bound to another daemon client/);
    expect((await record(unbound.json().id)).body.daemon_client_id).toBe(await clientOf(token));
  });

  it('updates the record when the machine’s GPUs changed', async () => {
    const { token } = await provider();
    const c = config();
    const id = await daemonWith(c, token).attach();
    const upgraded = config({
      state_file: c.state_file,
      gpu: {
        source: 'simulated',
        simulated_gpus: [
          { name: 'NVIDIA H200', memory_total_mib: 143771, driver_version: '580.159.04' },
          { name: 'NVIDIA H200', memory_total_mib: 143771, driver_version: '580.159.04' },
        ],
      },
    });
    expect(await daemonWith(upgraded, token).attach()).toBe(id);
    expect((await record(id)).body.gpus.map((g: { model_name: string }) => g.model_name)).toEqual([
      'NVIDIA H200',
      'NVIDIA H200',
    ]);
  });

  it('updates the record when the configuration says other of the machine: its location, address, metadata', async () => {
    const { token } = await provider();
    const c = config({ provider: { name: 'rig-1', hostname: 'rig-1.example.net', metadata: { rack: 'a', row: 1 } } });
    const id = await daemonWith(c, token).attach();
    const moved = config({
      state_file: c.state_file,
      provider: {
        name: 'rig-1',
        hostname: 'rig-1.dc2.example.net',
        ip_address: '203.0.113.7',
        location: 'eu-west',
        metadata: { rack: 'b', row: 1 },
      },
    });
    expect(await daemonWith(moved, token).attach()).toBe(id);
    expect((await record(id)).body).toMatchObject({
      hostname: 'rig-1.dc2.example.net',
      ip_address: '203.0.113.7',
      location: 'eu-west',
      metadata: { rack: 'b', row: 1 },
    });
  });

  it('registers again when its record was deleted under it', async () => {
    const { token } = await provider();
    const daemon = daemonWith(config(), token);
    const id = await daemon.attach();
    const deleted = await platform.registry.app.inject({
      method: 'DELETE',
      url: `/providers/${id}`,
      headers: await asPlatform(),
    });
    expect(deleted.statusCode).toBe(200);
    await daemon.heartbeat();
    expect(daemon.providerId).not.toBe(id);
    expect((await record(daemon.providerId!)).status).toBe(200);
  });

  it('backs off exponentially while the registry cannot be reached, and stops when told', async () => {
    const { token } = await provider();
    const waits: number[] = [];
    const c = config({
      registry_url: `http://127.0.0.1:${await freePort()}`,
      request_timeout: '500ms',
      max_backoff: '4s',
    });
    const daemon = new ProviderDaemon({
      config: c,
      logger,
      gpus: gpuSource(c.gpu),
      token,
      sleep: async (ms) => {
        waits.push(ms);
        if (waits.length === 5) daemon.stop();
      },
    });
    await daemon.run();
    expect(waits).toEqual([1000, 2000, 4000, 4000, 4000]);
  });

  it("reaches every service through the platform's one origin unless a service's own address is given", () => {
    const env = { PLATFORM_URL: 'https://api.gpu-platform.example', BILLING_URL: 'http://billing.internal:8003' };
    const loaded = loadDaemonConfig(env);
    expect([loaded.auth_url, loaded.registry_url, loaded.billing_url]).toEqual([
      'https://api.gpu-platform.example',
      'https://api.gpu-platform.example',
      'http://billing.internal:8003',
    ]);
    // By default: `pnpm start`'s gateway.
    expect(loadDaemonConfig({}).registry_url).toBe('http://127.0.0.1:8080');
    expect(() => loadDaemonConfig({ PLATFORM_URL: 'not a url' })).toThrow(/platform_url/);
  });

  it('takes every number setting from the environment as digits, and nothing else for one', () => {
    expect(loadDaemonConfig({ DAEMON__HEARTBEAT_ANSWER_EVERY: '4' }).heartbeat_answer_every).toBe(4);
    expect(() => loadDaemonConfig({ DAEMON__HEARTBEAT_ANSWER_EVERY: '' })).toThrow(/heartbeat_answer_every/);
  });

  it('loads the shipped example configuration as written', () => {
    const example = new URL('../daemon.example.yaml', import.meta.url).pathname;
    const loaded = loadDaemonConfig({ DAEMON_CONFIG_FILE: example });
    expect(loaded.provider.name).toBe('rig-1');
    // Every service through the gateway, as the README recommends: none at a port of its own.
    expect([loaded.platform_url, loaded.auth_url, loaded.registry_url, loaded.billing_url]).toEqual(
      Array(4).fill('http://127.0.0.1:8080'),
    );
    expect(loaded.gpu.source).toBe('nvidia-smi');
    expect(loaded.workloads).toMatchObject({
      run_dir: '/var/lib/gpu-daemon/workloads',
      container_runtime: 'podman',
      cgroups: true,
    });
  });

  it('refuses intervals and timeouts of nothing (0s would beat as fast as the CPU goes, or turn timeouts off)', () => {
    for (const over of [
      { heartbeat_interval: '0s' },
      { request_timeout: '0s' },
      { max_backoff: '500ms' },
      { workloads: { poll_interval: '0s' } },
      { workloads: { log_interval: '50ms' } },
      { workloads: { image_pull_timeout: '0s' } },
    ]) {
      expect(() => config(over), JSON.stringify(over)).toThrow(/at least/);
    }
    expect(
      config({ heartbeat_interval: '100ms', request_timeout: '100ms', max_backoff: '1s' }).heartbeat_interval,
    ).toBe('100ms');
  });

  it('refuses a simulated machine without GPUs, and credentials that are not a daemon’s', async () => {
    expect(() => daemonConfigSchema.parse({ gpu: { source: 'simulated' } })).toThrow(/simulated machine needs/);
    const notDaemon = await platform.machineClient('service');
    await expect(daemonWith(config(), notDaemon).attach()).rejects.toThrow(/not a daemon client/);
  });

  describe('heartbeats over NATS, with the metrics that moved', () => {
    let nc: NatsConnection;
    afterAll(() => nc?.close());

    it('beats over NATS when HTTP is away, sends a GPU only when its metrics moved, and all now and then', async () => {
      nc = await connect(testEnv.natsConnectOptions());
      const { token } = await provider();
      const c = config();
      const readings: GpuReading[] = (await gpuSource(c.gpu).read()).map((r) => ({ ...r, temperature: 50 }));
      const gpus = { kind: 'simulated' as const, read: async () => readings.map((r) => ({ ...r })) };
      const id = await new ProviderDaemon({ config: c, logger, gpus, token }).attach();
      // The same machine's daemon, restarted with a registry address nothing answers: only NATS reaches the registry.
      const away = config({ registry_url: `http://127.0.0.1:${await freePort()}`, state_file: c.state_file });
      const beats = natsHeartbeats({
        connection: nc,
        subject: platform.registry.config.messaging.subjects.heartbeats,
        token,
        // Generous: an answer that comes later than this falls back to HTTP, which nothing answers here.
        timeoutMs: 20_000,
        logger,
      });
      const daemon = new ProviderDaemon({ config: away, logger, gpus, token, beats });
      const seen = async () => (await record(id)).body as { last_seen_at: string; gpus: [{ temperature: number }] };

      await daemon.heartbeat();
      expect((await seen()).gpus[0].temperature).toBe(50);
      // Two degrees warmer: the clock moves, the stored temperature stays (it moved less than the step).
      readings[0]!.temperature = 52;
      const before = (await seen()).last_seen_at;
      await new Promise((r) => setTimeout(r, 5));
      await daemon.heartbeat();
      // Published, answered by nobody (the one before asked): applied a moment later.
      await expect
        .poll(async () => Date.parse((await seen()).last_seen_at), { timeout: 30_000 })
        .toBeGreaterThan(Date.parse(before));
      expect((await seen()).gpus[0].temperature).toBe(50);
      // Three more: sent.
      readings[0]!.temperature = 55;
      await daemon.heartbeat();
      expect((await seen()).gpus[0].temperature).toBe(55);
      // A degree, then the full report due every FULL_EVERY beats carries it.
      readings[0]!.temperature = 56;
      let beatsSent = 3;
      while (beatsSent % FULL_EVERY !== 0) {
        expect((await seen()).gpus[0].temperature).toBe(55);
        await daemon.heartbeat();
        beatsSent++;
      }
      expect((await seen()).gpus[0].temperature).toBe(55);
      await daemon.heartbeat();
      expect((await seen()).gpus[0].temperature).toBe(56);
    });

    it('asks for an answer every heartbeat_answer_every beats and with metrics, and publishes the rest unanswered', async () => {
      const { token } = await provider();
      const c = config({ heartbeat_answer_every: 3 });
      const readings: GpuReading[] = (await gpuSource(c.gpu).read()).map((r) => ({ ...r, temperature: 50 }));
      const gpus = { kind: 'simulated' as const, read: async () => readings.map((r) => ({ ...r })) };
      const subject = platform.registry.config.messaging.subjects.heartbeats;
      const beats = natsHeartbeats({ connection: nc, subject, token, timeoutMs: 2000, logger });
      const daemon = new ProviderDaemon({ config: c, logger, gpus, token, beats });
      const id = await daemon.attach();
      // What reaches NATS for this machine: whether each heartbeat asked for an answer (a reply subject).
      const asked: boolean[] = [];
      const watch = nc.subscribe(`${subject}.${id}`, {
        callback: (_err, msg) => {
          asked.push(Boolean(msg.reply));
        },
      });
      await nc.flush();
      const seen = async () => Date.parse((await record(id)).body.last_seen_at);
      for (let beat = 0; beat < 7; beat++) {
        // The fifth carries metrics that moved: it asks, whatever its turn.
        if (beat === 4) readings[0]!.temperature = 60;
        const before = await seen();
        await new Promise((r) => setTimeout(r, 5));
        await daemon.heartbeat();
        // Each is applied, asked or not.
        await expect.poll(seen, { timeout: 20_000 }).toBeGreaterThan(before);
      }
      await expect.poll(() => asked.length, { timeout: 20_000 }).toBe(7);
      // The first asks (nothing answered yet, and its metrics are all new), then one in three; the fifth has metrics.
      expect(asked).toEqual([true, false, false, true, true, false, false]);
      watch.unsubscribe();
    });

    it('beats over HTTP at once while the NATS connection is lost, asked or published, and closes without it', async () => {
      const nats = new DedicatedNats(await freePort());
      await nats.start();
      const publisher = (await connectPublisher({ url: nats.url, logger })) as NatsPublisher;
      try {
        const { token } = await provider();
        const c = config({ heartbeat_answer_every: 3 });
        const beats = natsHeartbeats({
          connection: publisher.connection,
          subject: platform.registry.config.messaging.subjects.heartbeats,
          token,
          timeoutMs: 10_000,
          live: () => publisher.connected,
          logger,
        });
        const daemon = new ProviderDaemon({ config: c, logger, gpus: gpuSource(c.gpu), token, beats });
        const id = await daemon.attach();
        await nats.stop();
        await expect.poll(() => publisher.connected, { timeout: 20_000 }).toBe(false);
        // Three beats: the one that would ask and the two that would only publish each reach the registry over HTTP,
        // none waiting for the request's 10 s.
        for (let beat = 0; beat < 3; beat++) {
          const before = Date.parse((await record(id)).body.last_seen_at);
          await new Promise((r) => setTimeout(r, 5));
          const started = Date.now();
          await daemon.heartbeat();
          // Short of the request's 10 s, which a beat that waited for it would take at least.
          expect(Date.now() - started).toBeLessThan(9_000);
          expect(Date.parse((await record(id)).body.last_seen_at), `beat ${beat}`).toBeGreaterThan(before);
        }
        await expect(publisher.close()).resolves.toBeUndefined();
      } finally {
        await publisher.close();
        await nats.destroy();
      }
    });

    it('sends a heartbeat over HTTP when no registry takes it over NATS', async () => {
      const { token } = await provider();
      const c = config();
      const beats = natsHeartbeats({ connection: nc, subject: 'nobody.listens.here', token, timeoutMs: 500, logger });
      const daemon = new ProviderDaemon({ config: c, logger, gpus: gpuSource(c.gpu), token, beats });
      const id = await daemon.attach();
      const before = (await record(id)).body.last_seen_at;
      await new Promise((r) => setTimeout(r, 5));
      await daemon.heartbeat();
      expect(Date.parse((await record(id)).body.last_seen_at)).toBeGreaterThan(Date.parse(before));
    });
  });
});
