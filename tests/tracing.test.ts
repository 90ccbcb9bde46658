/**
 * One rental is one trace: a client's `traceparent` on start-session, billing's calls to the registry (a fetch, its
 * client span, the registry's server span), the session event kept in billing's outbox and published over NATS in
 * a producer span of the same trace, the registry's consumer span under it (where the lease is taken) and the
 * registry's own event of it published under that, the daemon's usage report and the end. The provider daemon's
 * own reports on a session (usage over NATS and over HTTP, its workload's states) continue the session's trace in
 * spans of the daemon's, with billing's consumer and server spans under them.
 * Real auth, registry, billing and NATS JetStream in this process; the spans go to the SDK's in-memory exporter.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  connectPublisher,
  createLogger,
  type NatsPublisher,
  NoopPublisher,
  OutboxRelay,
  startTracing,
} from '@gpu/common';
import { captureLogs } from '@gpu/common/testing';
import { context, propagation, type Span, trace } from '@opentelemetry/api';
import { InMemorySpanExporter, type ReadableSpan } from '@opentelemetry/sdk-trace';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startUsageConsumer } from '../services/billing/src/adapters/usage-consumer.ts';
import { base58Encode } from '../services/billing/src/domain/chain/base58.ts';
import type { BillingHarness } from '../services/billing/test/support/setup.ts';
import { gpu, providerBody } from '../services/provider-registry/test/helpers.ts';
import { daemonConfigSchema } from '../tools/provider-daemon/src/config.ts';
import { ProviderDaemon } from '../tools/provider-daemon/src/daemon.ts';
import { gpuSource } from '../tools/provider-daemon/src/gpu/source.ts';
import { UsageReporter } from '../tools/provider-daemon/src/usage.ts';
import { WorkloadRunner } from '../tools/provider-daemon/src/workloads/runner.ts';
import { useAuthAndRegistry } from './support/auth-and-registry.ts';
import { billingWithRegistry } from './support/billing-with-registry.ts';

// Before any app is built: their server spans are made as they are registered.
const exporter = new InMemorySpanExporter();
const tracing = await startTracing({ service: 'tracing-test', exporter });
const platform = useAuthAndRegistry({}, { nats: true, consumeSessionEvents: true });
const logger = createLogger({ service: 'tracing-test', instanceId: 't', level: 'silent' });
let billing: BillingHarness;
let billingUrl: string;
let nats: NatsPublisher;
let relay: OutboxRelay;
const dir = mkdtempSync(join(tmpdir(), 'tracing-test-'));

beforeAll(async () => {
  const { messaging } = platform.registry.config;
  const stream = `TEST_TRACE_${randomUUID().slice(0, 8)}`;
  billing = await billingWithRegistry(platform, {
    config: { messaging: { stream, subjects: { events: messaging.subjects.billing_events } } },
  });
  nats = (await connectPublisher({
    url: messaging.nats_url,
    credentials: messaging.nats_credentials,
    stream: { name: stream, subjects: [`${messaging.subjects.billing_events}.>`] },
  })) as NatsPublisher;
  relay = new OutboxRelay(billing.db, nats, { subject: messaging.subjects.billing_events, logger });
  billingUrl = await billing.app.listen({ host: '127.0.0.1', port: 0 });
});
afterAll(async () => {
  await nats?.close();
  await billing?.close();
  await tracing?.shutdown();
  rmSync(dir, { recursive: true, force: true });
});

/** The headers a client in the span's trace sends: its `traceparent`. */
function traced(span: Span, headers: Record<string, string>): Record<string, string> {
  const carrier: Record<string, string> = {};
  propagation.inject(trace.setSpan(context.active(), span), carrier);
  return { ...headers, ...carrier };
}

const parentOf = (s: ReadableSpan) => s.parentSpanContext?.spanId;
const spanIdOf = (s: ReadableSpan | Span) => s.spanContext().spanId;

describe('tracing', () => {
  it('makes one rental one trace, through HTTP, the outbox, NATS and the consumers, with correct parents', async () => {
    const { user: owner, tokens: ownerTokens } = await platform.verifiedUser(['provider']);
    const registered = await fetch(`${platform.registryUrl}/providers`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ownerTokens.access_token}`, 'content-type': 'application/json' },
      body: JSON.stringify(providerBody({ owner_id: owner.id, gpus: [gpu({})] })),
    });
    expect(registered.status).toBe(201);
    const machine = ((await registered.json()) as { id: string }).id;
    const { user, tokens } = await platform.verifiedUser(['renter']);
    const renter = { authorization: `Bearer ${tokens.access_token}` };
    const wallet = await billing.app.inject({
      method: 'POST',
      url: '/api/v1/wallet',
      headers: renter,
      payload: { owner_type: 'user', owner_id: user.id, solana_address: base58Encode(randomBytes(32)) },
    });
    await billing.credit(wallet.json().id, '100');
    const daemon = await platform.machineClient('daemon', owner.id);
    const daemonHeaders = { authorization: `Bearer ${await daemon.get()}` };

    // The client's trace: one span for the whole rental, its calls carrying it.
    const root = trace.getTracer('renter').startSpan('rental');
    const started = await billing.app.inject({
      method: 'POST',
      url: '/api/v1/billing/start-session',
      headers: traced(root, renter),
      payload: {
        user_id: user.id,
        wallet_id: wallet.json().id,
        provider_id: machine,
        job_id: randomUUID(),
        gpu_model: 'A100',
        gpu_count: 1,
        requested_vram_mb: 0,
        estimated_power_w: 0,
        accepted_hourly_rate: '100',
      },
    });
    expect(started.statusCode, started.body).toBe(201);
    const sessionId = started.json().session.id as string;
    // The relay publishes the session's events (outside any request), in the trace that recorded them.
    expect(await relay.flush()).toBeGreaterThan(0);
    const traceId = root.spanContext().traceId;
    const ofTrace = () => exporter.getFinishedSpans().filter((s) => s.spanContext().traceId === traceId);
    // The registry's consumer takes the session.started event: its span ends once handled.
    await expect
      .poll(() => ofTrace().filter((s) => s.name.startsWith('process ') && s.name.endsWith('session.started')), {
        timeout: 30_000,
      })
      .toHaveLength(1);
    const usage = await billing.app.inject({
      method: 'POST',
      url: '/api/v1/billing/usage-update',
      headers: traced(root, daemonHeaders),
      payload: { session_id: sessionId, timestamp: new Date().toISOString(), gpu_utilization: 90, power_draw_w: 300 },
    });
    expect(usage.statusCode, usage.body).toBeLessThan(300);
    const ended = await billing.app.inject({
      method: 'POST',
      url: '/api/v1/billing/end-session',
      headers: traced(root, renter),
      payload: { session_id: sessionId },
    });
    expect(ended.statusCode, ended.body).toBe(200);
    root.end();
    // The registry's consumer of the held GPUs (another durable consumer than session.started's) ends its span once
    // handled: on a busy machine after the requests above.
    await expect
      .poll(() => ofTrace().filter((s) => s.name.startsWith('process ') && s.name.endsWith('.lease.held')), {
        timeout: 20_000,
      })
      .toHaveLength(1);

    const spans = ofTrace();
    const one = (what: string, match: (s: ReadableSpan) => boolean) => {
      const found = spans.filter(match);
      expect(
        found.map((s) => s.name),
        what,
      ).toHaveLength(1);
      return found[0] as ReadableSpan;
    };
    const billingServer = (route: string) =>
      one(`billing ${route}`, (s) => s.instrumentationScope.name === 'billing-service' && s.name === `POST ${route}`);
    const startSpan = billingServer('/api/v1/billing/start-session');
    expect(parentOf(startSpan)).toBe(root.spanContext().spanId);
    expect(startSpan.attributes.request_id).toBe(started.headers['x-request-id']);
    expect(startSpan.attributes['http.response.status_code']).toBe(201);

    // billing -> registry: the fetch's client span under start-session, the registry's server span under it.
    const registryServer = spans.filter(
      (s) => s.instrumentationScope.name === 'provider-registry' && s.kind === 1 /* SERVER */,
    );
    expect(registryServer.length).toBeGreaterThan(0);
    for (const server of registryServer) {
      const client = spans.find((s) => s.spanContext().spanId === parentOf(server));
      expect(client?.kind, `${server.name}'s parent is a client span`).toBe(2 /* CLIENT */);
      expect(parentOf(client as ReadableSpan), `${client?.name} is start-session's`).toBe(
        startSpan.spanContext().spanId,
      );
    }
    // The machine's record, read to price the session (its lease follows from the event, below).
    expect(registryServer.map((s) => s.name)).toContain('GET /providers/:providerID');

    // The outbox: billing's statement of the machine's held GPUs published in a producer span under start-session;
    // the registry's consumer span under that, where the registry shows the GPUs taken.
    const publish = one('publish', (s) => s.name.startsWith('publish ') && s.name.endsWith('.lease.held'));
    expect(publish.kind).toBe(3 /* PRODUCER */);
    expect(parentOf(publish)).toBe(startSpan.spanContext().spanId);
    const consume = one('process', (s) => s.name.startsWith('process ') && s.name.endsWith('.lease.held'));
    expect(consume.kind).toBe(4 /* CONSUMER */);
    expect(parentOf(consume)).toBe(publish.spanContext().spanId);
    // The session's own event is published in the same trace too (its parties read it).
    one('publish', (s) => s.name.startsWith('publish ') && s.name.endsWith('.session.started'));

    // The registry's own event of it (the machine busy), recorded by that consumer: published in a producer span
    // under it.
    await expect
      .poll(
        () =>
          ofTrace()
            .filter((s) => s.kind === 3 && parentOf(s) === consume.spanContext().spanId)
            .map((s) => s.name),
        { timeout: 30_000 },
      )
      .toEqual([expect.stringMatching(/^publish .*status/)]);

    // The daemon's usage and the renter's end, in the same trace.
    expect(parentOf(billingServer('/api/v1/billing/usage-update'))).toBe(root.spanContext().spanId);
    expect(parentOf(billingServer('/api/v1/billing/end-session'))).toBe(root.spanContext().spanId);
  });

  it("puts the daemon's usage reports (NATS and HTTP), its workload's state reports and its log lines in the session's trace", async () => {
    const owner = await platform.providerUser();
    const token = await platform.machineClient('daemon', owner.id);
    const suffix = randomUUID().slice(0, 8);
    const prefix = `trace-test-${suffix}.usage`;
    const stream = `USAGE_TRACE_${suffix}`;
    const publisher = (await connectPublisher({
      url: platform.registry.config.messaging.nats_url,
      credentials: platform.registry.config.messaging.nats_credentials,
      name: 'tracing-test-daemon',
      stream: { name: stream, subjects: [`${prefix}.>`] },
    })) as NatsPublisher;
    const consumer = await startUsageConsumer({
      connection: publisher.connection,
      ctx: billing.ctx,
      verifier: billing.app.tokenVerifier,
      prefix,
      logger,
      stream,
      durable: 'billing-usage',
    });
    // The run directory's parents let the workload's user through, as the daemon's workload tests set them.
    chmodSync(dir, 0o711);
    const config = daemonConfigSchema.parse({
      auth_url: platform.authUrl,
      registry_url: platform.registryUrl,
      billing_url: billingUrl,
      state_file: join(dir, `state-${suffix}.json`),
      provider: { name: `traced-${suffix}` },
      usage_subject: prefix,
      gpu: { source: 'simulated', simulated_gpus: [{ name: 'NVIDIA H100 80GB HBM3', memory_total_mib: 81559 }] },
      workloads: {
        run_dir: join(dir, 'run'),
        poll_interval: '200ms',
        stop_grace: '500ms',
        disk_mb: 64,
        memory_mb: 256,
      },
    });
    // The daemon's log lines, read back.
    const daemonLogs = captureLogs();
    const daemonLogger = createLogger({
      service: 'provider-daemon',
      instanceId: 't',
      level: 'info',
      destination: daemonLogs.destination,
    });
    const overNats = new UsageReporter({ config, logger, token, publisher });
    const overHttp = new UsageReporter({ config, logger: daemonLogger, token, publisher: new NoopPublisher() });
    const providerId = await new ProviderDaemon({ config, logger, gpus: gpuSource(config.gpu), token }).attach();
    try {
      // The renter's rental of the machine with a workload, in the renter's trace.
      const { user, tokens } = await platform.verifiedUser(['renter']);
      const renter = { authorization: `Bearer ${tokens.access_token}` };
      const wallet = await billing.app.inject({
        method: 'POST',
        url: '/api/v1/wallet',
        headers: renter,
        payload: { owner_type: 'user', owner_id: user.id, solana_address: base58Encode(randomBytes(32)) },
      });
      await billing.credit(wallet.json().id, '100');
      const root = trace.getTracer('renter').startSpan('rental with a workload');
      const started = await billing.app.inject({
        method: 'POST',
        url: '/api/v1/billing/start-session',
        headers: traced(root, renter),
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
          workload: { command: ['true'], max_runtime_seconds: 60 },
        },
      });
      expect(started.statusCode, started.body).toBe(201);
      root.end();
      const sessionId = started.json().session.id as string;
      const traceId = root.spanContext().traceId;
      const ofTrace = () => exporter.getFinishedSpans().filter((s) => s.spanContext().traceId === traceId);
      const startSpan = ofTrace().find((s) => s.name === 'POST /api/v1/billing/start-session')!;
      // Billing hands the session's trace (the start-session request's) with the session.
      expect(started.json().session.trace_context).toEqual({
        traceparent: `00-${traceId}-${spanIdOf(startSpan)}-01`,
      });

      // Usage, over NATS and over HTTP (each of its own minute).
      const readings = await gpuSource(config.gpu).read();
      const minute = Math.floor(Date.now() / 60_000) * 60_000;
      expect(await overNats.report(providerId, readings, new Date(minute))).toBe(1);
      expect(await overHttp.report(providerId, readings, new Date(minute + 60_000))).toBe(1);
      // Billing refuses a report dated an hour ahead, and the daemon says so (checked below, with the spans).
      await overHttp.report(providerId, readings, new Date(Date.now() + 3_600_000));
      // The workload, run by the daemon's runner: it reports each of its states.
      const runner = new WorkloadRunner({
        config,
        logger,
        token,
        gpus: gpuSource(config.gpu),
        providerId: () => providerId,
        sessions: (id) => overHttp.runningSessions(id),
        traces: overHttp.traces,
      });
      runner.run();
      try {
        await expect
          .poll(
            async () =>
              (
                await billing.app.inject({ url: `/api/v1/billing/sessions/${sessionId}/workload`, headers: renter })
              ).json().state,
            { timeout: 30_000 },
          )
          .toMatch(/^(exited|failed|stopped)$/);
      } finally {
        await runner.stop();
      }

      const daemonSpans = () => ofTrace().filter((s) => s.instrumentationScope.name === 'provider-daemon');
      const childrenOf = (parent: ReadableSpan) => ofTrace().filter((s) => parentOf(s) === spanIdOf(parent));
      // Over NATS: the daemon's producer span under start-session, billing's usage consumer span under it.
      const publish = daemonSpans().find((s) => s.name === `publish ${prefix}.${sessionId}`)!;
      expect(publish?.kind).toBe(3 /* PRODUCER */);
      expect(parentOf(publish)).toBe(spanIdOf(startSpan));
      await expect
        .poll(() => childrenOf(publish).map((s) => [s.instrumentationScope.name, s.name, s.kind]), { timeout: 30_000 })
        .toEqual([['usage consumer', `process ${prefix}.${sessionId}`, 4 /* CONSUMER */]]);
      // Over HTTP, and each workload state: a span of the daemon's under start-session; the request's client span
      // under it; billing's server span under that.
      const billingServerUnder = (daemonSpan: ReadableSpan) =>
        childrenOf(daemonSpan)
          .filter((s) => s.kind === 2 /* CLIENT */)
          .flatMap((client) => childrenOf(client))
          .filter((s) => s.instrumentationScope.name === 'billing-service')
          .map((s) => s.name);
      const usageReport = daemonSpans().find((s) => s.name === 'report usage' && billingServerUnder(s).length > 0)!;
      expect(parentOf(usageReport)).toBe(spanIdOf(startSpan));
      expect(billingServerUnder(usageReport)).toEqual(['POST /api/v1/billing/usage-updates']);
      const states = daemonSpans().filter((s) => s.name.startsWith('report workload '));
      expect(states.map((s) => s.name)).toEqual(expect.arrayContaining(['report workload preparing']));
      expect(states.length).toBeGreaterThanOrEqual(2);
      for (const state of states) {
        expect(parentOf(state), state.name).toBe(spanIdOf(startSpan));
        expect(billingServerUnder(state), state.name).toEqual([
          'POST /api/v1/billing/sessions/:sessionID/workload/state',
        ]);
      }

      // A line the daemon logs while it reports (the refusal above) names the session's trace and the daemon's span.
      const refused = daemonLogs.lines().filter((l) => l.msg === 'billing refused a usage report');
      expect(refused).toHaveLength(1);
      expect(refused[0]!.trace_id).toBe(traceId);
      const reporting = daemonSpans().filter((s) => s.name === 'report usage' && spanIdOf(s) === refused[0]!.span_id);
      expect(reporting).toHaveLength(1);
    } finally {
      await consumer.stop();
      await publisher.close();
    }
  });

  it("exposes the registry's consumers' lag on /metrics once they run", async () => {
    const scrape = async () => (await platform.registry.app.inject({ url: '/metrics' })).body;
    await expect
      .poll(scrape, { timeout: 30_000 })
      .toMatch(/^registry_consumer_pending\{[^}]*consumer="[^"]+"[^}]*\} \d+$/m);
    // Every message handled above: nothing waits.
    expect([...(await scrape()).matchAll(/^registry_consumer_pending\{[^}]*\} (\d+)$/gm)].map((m) => m[1])).toEqual(
      expect.arrayContaining(['0']),
    );
  });
});
