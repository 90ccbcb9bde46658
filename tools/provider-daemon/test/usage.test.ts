/**
 * The daemon's usage reports against the real auth service, the real provider registry and billing asking that
 * registry: a renter rents the daemon's machine, the daemon finds the session and reports its usage over HTTP and
 * over NATS JetStream, once per minute whatever the retries and restarts; a daemon process killed with SIGKILL and
 * started again finds its machine and the running session, and reports on. A daemon that does not trace carries the
 * session's trace context, as billing handed it, on every report (tests/tracing.test.ts: one that traces).
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { staticToken, type TokenSource } from '@gpu/client';
import {
  connectPublisher,
  createLogger,
  type EventPublisher,
  type NatsPublisher,
  NoopPublisher,
  UNCHECKED_PRINCIPAL,
} from '@gpu/common';
import { connectAsDaemon, testEnv } from '@gpu/common/testing';
import { decodeJwt } from 'jose';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient } from '../../../services/auth/src/domain/clients.ts';
import { startUsageConsumer } from '../../../services/billing/src/adapters/usage-consumer.ts';
import type { BillingHarness } from '../../../services/billing/test/support/setup.ts';
import { useAuthAndRegistry } from '../../../tests/support/auth-and-registry.ts';
import { billingWithRegistry } from '../../../tests/support/billing-with-registry.ts';
import { rentAtBilling } from '../../../tests/support/rent.ts';
import { type DaemonConfig, daemonConfigSchema } from '../src/config.ts';
import { ProviderDaemon } from '../src/daemon.ts';
import { gpuSource } from '../src/gpu/source.ts';
import { UsageReporter } from '../src/usage.ts';

const platform = useAuthAndRegistry();
const dir = mkdtempSync(join(tmpdir(), 'daemon-usage-'));
const logger = createLogger({ service: 'provider-daemon-test', instanceId: 't', level: 'silent' });
let billing: BillingHarness;
let billingUrl: string;

beforeAll(async () => {
  billing = await billingWithRegistry(platform);
  billingUrl = await billing.app.listen({ host: '127.0.0.1', port: 0 });
});
afterAll(async () => {
  await billing?.close();
  rmSync(dir, { recursive: true, force: true });
});

function config(over: Record<string, unknown> = {}): DaemonConfig {
  return daemonConfigSchema.parse({
    auth_url: platform.authUrl,
    registry_url: platform.registryUrl,
    billing_url: billingUrl,
    state_file: join(dir, `state-${randomUUID()}.json`),
    provider: { name: `rig-${randomUUID().slice(0, 8)}` },
    gpu: {
      source: 'simulated',
      simulated_gpus: [
        {
          name: 'NVIDIA H100 80GB HBM3',
          memory_total_mib: 81559,
          power_limit_w: 700,
          utilization_gpu: 87,
          power_draw_w: 610,
        },
      ],
    },
    ...over,
  });
}

/** A provider's daemon on a simulated H100 machine, attached to its registry record. */
async function daemonOnMachine(publisher: EventPublisher = new NoopPublisher(), over: Record<string, unknown> = {}) {
  const owner = await platform.providerUser();
  const token: TokenSource = await platform.machineClient('daemon', owner.id);
  const c = config(over);
  const make = () => {
    const usage = new UsageReporter({ config: c, logger, token, publisher });
    return { usage, daemon: new ProviderDaemon({ config: c, logger, gpus: gpuSource(c.gpu), token, usage }) };
  };
  const first = make();
  const providerId = await first.daemon.attach();
  return { ...first, providerId, restart: make };
}

/** A renter of the real auth service renting the machine at billing (`gpuCount` GPUs); the session's ID. */
const rent = async (providerId: string, gpuCount = 1) =>
  (await rentAtBilling(platform, billing, providerId, { gpuCount })).id;

const records = (sessionId: string) =>
  billing.db
    .selectFrom('usage_records')
    .select(['message_id', 'gpu_utilization', 'power_draw_w'])
    .where('session_id', '=', sessionId)
    .orderBy('message_id')
    .execute();

// Polls until `done` holds: a generous deadline costs nothing when it does, and a busy machine can be slow.
async function until<T>(read: () => Promise<T>, done: (v: T) => boolean, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await read();
    if (done(v) || Date.now() > end) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * A moment to report at: two minutes ahead of now, on a minute of its own (not the one a heartbeat reports now), yet
 * within the clock skew billing allows a daemon (5 minutes), a minute later too.
 */
const aheadOfNow = () => new Date(Math.floor(Date.now() / 60_000) * 60_000 + 2 * 60_000 + 10_000);

describe('provider daemon usage reports', () => {
  it('reports each running session on its machine over HTTP, once per minute across retries and restarts', async () => {
    const { usage, daemon, providerId, restart } = await daemonOnMachine();
    // Nothing rented yet: nothing to report.
    const readings = await gpuSource(config().gpu).read();
    expect(await usage.report(providerId, readings)).toBe(0);

    const sessionId = await rent(providerId);
    const t = aheadOfNow();
    expect(await usage.report(providerId, readings, t)).toBe(1);
    // The same minute again (a retry, a second heartbeat in the minute, a restarted daemon): applied once.
    await usage.report(providerId, readings, new Date(t.getTime() + 30_000));
    await restart().usage.report(providerId, readings, new Date(t.getTime() + 45_000));
    const minute = Math.floor(t.getTime() / 60_000);
    expect(await records(sessionId)).toEqual([
      { message_id: `${sessionId}:${minute}`, gpu_utilization: '87', power_draw_w: '610' },
    ]);
    await usage.report(providerId, readings, new Date(t.getTime() + 60_000));
    expect((await records(sessionId)).map((r) => r.message_id)).toEqual([
      `${sessionId}:${minute}`,
      `${sessionId}:${minute + 1}`,
    ]);

    // A heartbeat reports too; another machine's daemon finds nothing of this session.
    await daemon.heartbeat();
    expect((await records(sessionId)).length).toBe(3);
    const other = await daemonOnMachine();
    expect(await other.usage.runningSessions(providerId)).toEqual([]);
  });

  it('gives up on a list of sessions that never ends (a cursor given again and again), rather than hold the heartbeat', async () => {
    let pages = 0;
    const endless = createServer((req, res) => {
      req.resume();
      pages++;
      res.writeHead(200, { 'content-type': 'application/json', 'x-next-cursor': `page-${pages % 3}` }).end('[]');
    });
    await new Promise<void>((resolve) => endless.listen(0, '127.0.0.1', resolve));
    try {
      const c = config({ billing_url: `http://127.0.0.1:${(endless.address() as AddressInfo).port}` });
      const usage = new UsageReporter({ config: c, logger, token: staticToken('t'), publisher: new NoopPublisher() });
      await expect(usage.runningSessions(randomUUID())).rejects.toThrow(/does not end/);
      expect(pages).toBeLessThanOrEqual(11);
    } finally {
      endless.close();
    }
  });

  it('reports each session of a shared machine from its own GPUs only', async () => {
    // Eight H100s drawing 100, 110, ... 170 W: two renters take four each.
    const simulated_gpus = Array.from({ length: 8 }, (_, i) => ({
      name: 'NVIDIA H100 80GB HBM3',
      memory_total_mib: 81559,
      power_limit_w: 700,
      utilization_gpu: i < 4 ? 20 : 80,
      power_draw_w: 100 + 10 * i,
    }));
    const { usage, providerId } = await daemonOnMachine(new NoopPublisher(), {
      gpu: { source: 'simulated', simulated_gpus },
    });
    const first = await rent(providerId, 4);
    const second = await rent(providerId, 4);
    expect(await usage.runningSessions(providerId)).toEqual(
      expect.arrayContaining([
        { id: first, gpuIndices: [0, 1, 2, 3], workload: false },
        { id: second, gpuIndices: [4, 5, 6, 7], workload: false },
      ]),
    );
    const readings = await gpuSource(config({ gpu: { source: 'simulated', simulated_gpus } }).gpu).read();
    expect(await usage.report(providerId, readings, aheadOfNow())).toBe(2);
    const [a] = await records(first);
    const [b] = await records(second);
    expect(a).toMatchObject({ gpu_utilization: '20', power_draw_w: String(100 + 110 + 120 + 130) });
    expect(b).toMatchObject({ gpu_utilization: '80', power_draw_w: String(140 + 150 + 160 + 170) });
  });

  it('reports over NATS JetStream with its token, and falls back to HTTP when NATS does not take a report', async () => {
    const prefix = `daemon-test-${randomUUID().slice(0, 8)}.usage`;
    const stream = `USAGE_DAEMON_${randomUUID().slice(0, 8)}`;
    const publisher = await connectPublisher({
      url: testEnv.natsUrl,
      credentials: testEnv.natsCredentials,
      name: 'daemon-usage-test',
      stream: { name: stream, subjects: [`${prefix}.>`] },
    });
    const consumer = await startUsageConsumer({
      connection: (publisher as unknown as { connection: Parameters<typeof startUsageConsumer>[0]['connection'] })
        .connection,
      ctx: billing.ctx,
      verifier: billing.app.tokenVerifier,
      prefix,
      logger,
      stream,
      durable: 'billing-usage',
    });
    try {
      const owner = await platform.providerUser();
      const token = await platform.machineClient('daemon', owner.id);
      const c = config({ usage_subject: prefix });
      const usage = new UsageReporter({ config: c, logger, token, publisher });
      const daemon = new ProviderDaemon({ config: c, logger, gpus: gpuSource(c.gpu), token, usage });
      const providerId = await daemon.attach();
      const sessionId = await rent(providerId);
      const readings = await gpuSource(c.gpu).read();
      const t = aheadOfNow();
      await usage.report(providerId, readings, t);
      const got = await until(
        () => records(sessionId),
        (r) => r.length >= 1,
      );
      expect(got.map((r) => r.message_id)).toEqual([`${sessionId}:${Math.floor(t.getTime() / 60_000)}`]);

      // NATS gone: the next report goes over HTTP.
      await publisher.close();
      await usage.report(providerId, readings, new Date(t.getTime() + 60_000));
      expect((await records(sessionId)).length).toBe(2);
    } finally {
      await consumer.stop();
    }
  });
});

describe('usage as NATS requests, from a daemon holding a NATS user of its own', () => {
  it('is answered once applied; with nobody answering, the reports go over HTTP', async () => {
    const suffix = randomUUID().slice(0, 8);
    const reportsPrefix = `daemon-requests-${suffix}.usage-reports`;
    const stream = `USAGE_REQ_${suffix}`;
    const owner = await platform.providerUser();
    const token = await platform.machineClient('daemon', owner.id);
    const client = String(decodeJwt(await token.get()).sub);
    // Billing's side: its usage requests served (`subject_identity`), as an instance does.
    const billingNats = (await connectPublisher({
      url: testEnv.natsUrl,
      credentials: testEnv.natsCredentials,
      name: 'daemon-requests-billing',
      stream: { name: stream, subjects: [`daemon-requests-${suffix}.usage.>`] },
    })) as NatsPublisher;
    const consumer = await startUsageConsumer({
      connection: billingNats.connection,
      ctx: billing.ctx,
      verifier: billing.app.tokenVerifier,
      prefix: `daemon-requests-${suffix}.usage`,
      subjectIdentity: true,
      reportsPrefix,
      logger,
      stream,
      durable: 'billing-usage',
    });
    // The daemon's connection as its issued user makes it: it may publish on its own subjects alone.
    const own = await connectAsDaemon({ owner: owner.id, client }, { usage: reportsPrefix });
    const proxy = await recordingProxy();
    try {
      const c = config({ usage_reports_subject: reportsPrefix, billing_url: proxy.url });
      const usage = new UsageReporter({
        config: c,
        logger,
        token,
        publisher: new NoopPublisher(),
        natsIdentity: { owner: owner.id, client, connection: own },
      });
      const daemon = new ProviderDaemon({ config: c, logger, gpus: gpuSource(c.gpu), token, usage });
      const providerId = await daemon.attach();
      const sessionId = await rent(providerId);
      const readings = await gpuSource(c.gpu).read();
      const posts = () => proxy.seen.filter((r) => r.method === 'POST' && r.url === '/api/v1/billing/usage-updates');
      const t = aheadOfNow();
      // Answered once applied: the record is there when report() returns, and nothing went over HTTP.
      expect(await usage.report(providerId, readings, t)).toBe(1);
      expect(await records(sessionId)).toHaveLength(1);
      expect(posts()).toEqual([]);
      // No billing instance answering (none serves usage requests): over HTTP, applied all the same.
      await consumer.stop();
      expect(await usage.report(providerId, readings, new Date(t.getTime() + 60_000))).toBe(1);
      expect(await records(sessionId)).toHaveLength(2);
      expect(posts()).toHaveLength(1);
    } finally {
      await consumer.stop();
      await own.close();
      await proxy.close();
      const { jetstreamManager } = await import('@nats-io/jetstream');
      await (await jetstreamManager(billingNats.connection)).streams.delete(stream);
      await billingNats.close();
    }
  });
});

/** A plain HTTP proxy in front of billing that notes each request's headers (what the daemon sent). */
async function recordingProxy(): Promise<{
  url: string;
  seen: { method?: string; url?: string; headers: IncomingHttpHeaders }[];
  close(): Promise<void>;
}> {
  const seen: { method?: string; url?: string; headers: IncomingHttpHeaders }[] = [];
  const server = createServer((req, res) => {
    seen.push({ method: req.method, url: req.url, headers: req.headers });
    const upstream = request(`${billingUrl}${req.url}`, { method: req.method, headers: req.headers }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    });
    req.pipe(upstream);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    seen,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

describe("the session's trace on a daemon's reports", () => {
  it('carries the trace context billing handed with the session, over NATS and HTTP, when the daemon does not trace', async () => {
    const prefix = `daemon-trace-${randomUUID().slice(0, 8)}.usage`;
    const stream = `USAGE_TRACE_${randomUUID().slice(0, 8)}`;
    const publisher = (await connectPublisher({
      url: testEnv.natsUrl,
      credentials: testEnv.natsCredentials,
      name: 'daemon-trace-test',
      stream: { name: stream, subjects: [`${prefix}.>`] },
    })) as NatsPublisher;
    const proxy = await recordingProxy();
    try {
      const h100 = { name: 'NVIDIA H100 80GB HBM3', memory_total_mib: 81559, power_limit_w: 700, power_draw_w: 610 };
      const gpu = { source: 'simulated', simulated_gpus: [h100, h100, h100] };
      const { usage, providerId } = await daemonOnMachine(publisher, {
        usage_subject: prefix,
        billing_url: proxy.url,
        gpu,
      });
      const traced = await rent(providerId);
      const untraced = await rent(providerId);
      const unsampled = await rent(providerId);
      // Billing traced the start of one of them (tracing is off in this process: its column, as a tracing billing
      // writes it), and wrote the context of another whose trace was not kept (its flags 00: no span anywhere).
      const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
      const notKept = '00-5bf92f3577b34da6a3ce929d0e0e4736-10f067aa0ba902b7-00';
      await sql`UPDATE rental_sessions SET trace_context = ${JSON.stringify({ traceparent, tracestate: 'gpu=1' })}::jsonb
        WHERE id = ${traced}`.execute(billing.db);
      await sql`UPDATE rental_sessions SET trace_context = ${JSON.stringify({ traceparent: notKept })}::jsonb
        WHERE id = ${unsampled}`.execute(billing.db);
      const readings = await gpuSource(config({ gpu }).gpu).read();

      // Over NATS: each message's headers (a plain subscriber sees what JetStream stored).
      const subscription = publisher.connection.subscribe(`${prefix}.>`, { max: 3 });
      expect(await usage.report(providerId, readings, aheadOfNow())).toBe(3);
      const headers = new Map<string, { traceparent?: string; tracestate?: string }>();
      for await (const msg of subscription) {
        headers.set(msg.subject.split('.').pop()!, {
          traceparent: msg.headers?.get('traceparent') || undefined,
          tracestate: msg.headers?.get('tracestate') || undefined,
        });
      }
      expect(headers.get(traced)).toEqual({ traceparent, tracestate: 'gpu=1' });
      expect(headers.get(untraced)).toEqual({ traceparent: undefined, tracestate: undefined });
      expect(headers.get(unsampled)).toEqual({ traceparent: notKept, tracestate: undefined });

      // NATS gone, over HTTP: the traced session's report in a request of its own, carrying the context; the others'
      // together without one (a trace not kept makes no span: its report need not go alone).
      await publisher.close();
      proxy.seen.length = 0;
      expect(await usage.report(providerId, readings, new Date(aheadOfNow().getTime() + 60_000))).toBe(3);
      const posts = proxy.seen.filter((r) => r.method === 'POST' && r.url === '/api/v1/billing/usage-updates');
      expect(posts.map((r) => r.headers.traceparent ?? 'none').sort()).toEqual([traceparent, 'none'].sort());
      expect(posts.find((r) => r.headers.traceparent)?.headers.tracestate).toBe('gpu=1');
      // Applied (the NATS ones wait in their stream: no consumer here).
      expect((await records(traced)).length).toBe(1);
      expect((await records(untraced)).length).toBe(1);
      expect((await records(unsampled)).length).toBe(1);
    } finally {
      await publisher.close();
      await proxy.close();
    }
  });
});

describe('a daemon killed with SIGKILL', () => {
  it('comes back to its machine and its running session, and reports on: no minute counted twice, none left out', {
    timeout: 150_000,
  }, async () => {
    const owner = await platform.providerUser();
    const { client, secret } = await createClient(platform.auth.ctx, UNCHECKED_PRINCIPAL, {
      name: `rig-daemon-${randomUUID().slice(0, 8)}`,
      role: 'daemon',
      owner_id: owner.id,
    });
    const stateFile = join(dir, `state-${randomUUID()}.json`);
    const configFile = join(dir, `daemon-${randomUUID()}.json`);
    writeFileSync(
      configFile,
      JSON.stringify({
        log_level: 'warn',
        auth_url: platform.authUrl,
        registry_url: platform.registryUrl,
        billing_url: billingUrl,
        credentials: { client_id: client.id, client_secret: secret },
        state_file: stateFile,
        provider: { name: `rig-${randomUUID().slice(0, 8)}` },
        heartbeat_interval: '1s',
        gpu: {
          source: 'simulated',
          simulated_gpus: [
            { name: 'NVIDIA H100 80GB HBM3', memory_total_mib: 81559, power_limit_w: 700, power_draw_w: 610 },
          ],
        },
        // Its workloads' folder (and journal) in the test's own folder, not the default under the working directory.
        workloads: { run_dir: join(dir, `run-${randomUUID().slice(0, 8)}`) },
      }),
      { mode: 0o600 },
    );
    const start = () =>
      spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
        cwd: join(import.meta.dirname, '..'),
        env: { ...process.env, DAEMON_CONFIG_FILE: configFile },
        stdio: ['ignore', 'ignore', 'inherit'],
      });
    const machineOf = () =>
      until(
        async () => {
          try {
            return (JSON.parse(readFileSync(stateFile, 'utf8')) as { provider_id?: string }).provider_id;
          } catch {
            return undefined;
          }
        },
        (id) => id !== undefined,
        20_000,
      );
    let daemon = start();
    try {
      const providerId = (await machineOf())!;
      const sessionId = await rent(providerId);
      const minuteOf = (id: string) => Number(id.split(':')[1]);
      const before = await until(
        () => records(sessionId),
        (r) => r.length >= 1,
        20_000,
      );
      expect(before.length).toBeGreaterThan(0);

      const machineToken = await platform.machineClient('daemon', owner.id);
      const readMachine = async () => {
        const res = await fetch(`${platform.registryUrl}/providers/${providerId}`, {
          headers: { authorization: `Bearer ${await machineToken.get()}` },
        });
        return (await res.json()) as { status: string; last_seen_at: string };
      };
      const statusBefore = (await readMachine()).status;

      // kill -9: no goodbye, no state written on the way out.
      daemon.kill('SIGKILL');
      await new Promise((r) => daemon.once('exit', r));
      const killedAt = Date.now();
      daemon = start();
      expect(await machineOf()).toBe(providerId);
      // Its heartbeats come again, and leave the machine's status as it was (the daemon states nothing anew).
      const machine = await until(readMachine, (p) => Date.parse(p.last_seen_at) > killedAt, 20_000);
      expect(Date.parse(machine.last_seen_at)).toBeGreaterThan(killedAt);
      expect(machine.status).toBe(statusBefore);

      // It finds the session at billing again and reports the next minute (within a minute and a bit; waited for up
      // to 100 s, which costs nothing once it is there, as a busy machine can take a while to restart the daemon).
      const last = Math.max(...before.map((r) => minuteOf(r.message_id)));
      const after = await until(
        () => records(sessionId),
        (r) => r.some((x) => minuteOf(x.message_id) > last),
        100_000,
      );
      const minutes = after.map((r) => minuteOf(r.message_id));
      expect(Math.max(...minutes)).toBeGreaterThan(last);
      // One record per minute, each minute from the first report to the last: none twice, none left out.
      const first = Math.min(...minutes);
      expect([...minutes].sort((a, b) => a - b)).toEqual(
        Array.from({ length: Math.max(...minutes) - first + 1 }, (_, i) => first + i),
      );
      // Still the one machine of that name: the daemon re-attached, it did not register again.
      const list = await fetch(`${platform.registryUrl}/providers?limit=1000`, {
        headers: { authorization: `Bearer ${await machineToken.get()}` },
      });
      expect(((await list.json()) as { id: string }[]).map((p) => p.id)).toEqual([providerId]);
    } finally {
      daemon.kill('SIGKILL');
    }
  });
});
