/**
 * When tracing is on: only with an OTLP endpoint (or an exporter a test gives), never with OTEL_SDK_DISABLED; off,
 * nothing is started, and the apps' hooks and the outbox's trace context stay out of the way (the outbox test checks
 * that an event keeps none). On, the platform's fraction of traces is kept by the randomness the edge draws (else by
 * the trace ID) whatever a caller's flag, trace ID or randomness say, through a real app; and every line logged inside
 * a request or a NATS message names its trace and span.
 * tests/tracing.test.ts follows one rental through every hop with tracing on.
 */
import { randomBytes } from 'node:crypto';
import { jetstreamManager } from '@nats-io/jetstream';
import { context, propagation, ROOT_CONTEXT, trace } from '@opentelemetry/api';
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace';
import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  activeTraceContext,
  baseConfigSchema,
  connectPublisher,
  createApp,
  createLogger,
  type NatsPublisher,
  startDurableConsumer,
  startSpanOf,
  startTracing,
  tracingConfigured,
  tracingOn,
} from '../src/index.ts';
import { edgeTraceState, tracingHooks } from '../src/telemetry/tracing.ts';
import { captureLogs, testEnv } from '../src/testing/index.ts';

describe('tracing configuration', () => {
  it('is on with an OTLP endpoint, for all signals or for traces, unless the SDK is disabled', () => {
    expect(tracingConfigured({})).toBe(false);
    expect(tracingConfigured({ OTEL_EXPORTER_OTLP_ENDPOINT: '' })).toBe(false);
    expect(tracingConfigured({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' })).toBe(true);
    expect(tracingConfigured({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://collector:4318/v1/traces' })).toBe(true);
    expect(tracingConfigured({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_SDK_DISABLED: 'TRUE' })).toBe(
      false,
    );
  });

  it('starts nothing when it is off', async () => {
    expect(await startTracing({ service: 'test', env: {} })).toBeUndefined();
    expect(tracingOn()).toBe(false);
  });
});

describe('tracing on, with a caller in front', () => {
  it("keeps the configured fraction of a caller's traces whatever its sampled flag, and carries no baggage", async () => {
    const exporter = new InMemorySpanExporter();
    const tracing = await startTracing({ service: 'test', exporter, env: { OTEL_TRACES_SAMPLER_ARG: '0' } });
    try {
      expect(tracingOn()).toBe(true);
      // A caller asks for its trace to be kept (flags 01), with baggage: the fraction 0 keeps nothing.
      const parent = propagation.extract(ROOT_CONTEXT, {
        traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
        baggage: 'user=someone-else',
      });
      const span = trace.getTracer('test').startSpan('a request', {}, parent);
      expect(span.isRecording()).toBe(false);
      span.end();
      expect(exporter.getFinishedSpans()).toEqual([]);
      // What the platform would carry on: nothing for a trace not kept, and never the caller's baggage.
      const carrier: Record<string, string> = {};
      propagation.inject(parent, carrier);
      expect(carrier.baggage).toBeUndefined();
    } finally {
      await tracing?.shutdown();
    }
    expect(tracingOn()).toBe(false);
  });
});

/**
 * Trace IDs on either side of the fraction 0.5 as OpenTelemetry's TraceIdRatioBasedSampler decides it (the XOR of the
 * ID's four 32-bit words against 0.5 x 0xffffffff): one the platform keeps, one it drops.
 */
const KEPT_AT_HALF = '0000000000000000000000000000abcd';
const DROPPED_AT_HALF = 'ffffffff000000000000000000000001';
const CALLER_SPAN = 'b7ad6b7169203331';

/** An app of the platform's factory (access control off) whose route logs a line and answers what it would carry on. */
async function tracedApp(logs: ReturnType<typeof captureLogs>) {
  const app = await createApp({
    service: 'traced-service',
    description: 'test',
    config: baseConfigSchema.parse({ access: { enabled: false } }),
    logger: createLogger({ service: 'test', instanceId: 'i-1', level: 'info', destination: logs.destination }),
  });
  app.get('/work', async (request) => {
    request.log.info('working on it');
    return { carried: activeTraceContext()?.traceparent ?? null };
  });
  await app.ready();
  return app;
}

describe("tracing on: a caller's sampled flag decides nothing", () => {
  it('keeps the trace a caller marked not sampled when its ID is in the fraction, and drops one marked sampled when not', async () => {
    const exporter = new InMemorySpanExporter();
    const tracing = await startTracing({ service: 'test', exporter, env: { OTEL_TRACES_SAMPLER_ARG: '0.5' } });
    const logs = captureLogs();
    const app = await tracedApp(logs);
    try {
      const call = async (traceId: string, flags: '00' | '01') => {
        const res = await app.inject({
          url: '/work',
          headers: { traceparent: `00-${traceId}-${CALLER_SPAN}-${flags}`, 'x-request-id': `${traceId}-${flags}` },
        });
        expect(res.statusCode).toBe(200);
        const spans = exporter.getFinishedSpans().filter((s) => s.spanContext().traceId === traceId);
        const lines = logs.lines().filter((l) => l.request_id === `${traceId}-${flags}`);
        return { carried: res.json().carried as string, spans, lines };
      };

      // A caller that says "not sampled", its trace ID in the platform's half: traced, under the caller's span.
      const unsampled = await call(KEPT_AT_HALF, '00');
      expect(unsampled.spans.map((s) => s.name)).toEqual(['GET /work']);
      expect(unsampled.spans[0]?.parentSpanContext?.spanId).toBe(CALLER_SPAN);
      const server = unsampled.spans[0]!.spanContext().spanId;
      expect(unsampled.carried).toBe(`00-${KEPT_AT_HALF}-${server}-01`);

      // A caller that says "sampled", its trace ID outside that half: not traced, and carried on as not kept, so
      // that the next hop decides alike.
      const sampled = await call(DROPPED_AT_HALF, '01');
      expect(sampled.spans).toEqual([]);
      expect(sampled.carried).toMatch(new RegExp(`^00-${DROPPED_AT_HALF}-[0-9a-f]{16}-00$`));

      // Every line of either request names its trace and span, kept or not.
      for (const [traceId, { lines, carried }] of [
        [KEPT_AT_HALF, unsampled],
        [DROPPED_AT_HALF, sampled],
      ] as const) {
        const spanId = carried.split('-')[2];
        expect(lines.map((l) => l.msg)).toEqual(['incoming request', 'working on it', 'request completed']);
        for (const line of lines) expect(line, String(line.msg)).toMatchObject({ trace_id: traceId, span_id: spanId });
      }
    } finally {
      await app.close();
      await tracing?.shutdown();
    }
  });

  it('names no trace in log lines when tracing is off', async () => {
    const logs = captureLogs();
    const app = await tracedApp(logs);
    try {
      const res = await app.inject({ url: '/work', headers: { traceparent: `00-${KEPT_AT_HALF}-${CALLER_SPAN}-01` } });
      expect(res.json().carried).toBeNull();
      expect(logs.lines().length).toBeGreaterThan(0);
      for (const line of logs.lines()) expect(line).not.toHaveProperty('trace_id');
    } finally {
      await app.close();
    }
  });
});

describe("tracing on: the edge's randomness decides, not the caller", () => {
  /** An app that answers the trace context it would carry on: the gateway's (`edge`) or a service's. */
  async function contextApp(edge: boolean) {
    const app = Fastify();
    await app.register(tracingHooks, { service: edge ? 'edge' : 'service', edge });
    app.get('/work', async () => activeTraceContext() ?? {});
    await app.ready();
    return app;
  }
  const headers = (traceId: string, tracestate: string) => ({
    traceparent: `00-${traceId}-${CALLER_SPAN}-01`,
    tracestate,
  });
  const ALWAYS = 'ffffffffffffff';
  const NEVER = '00000000000000';

  it('keeps a trace at a service by the randomness its tracestate carries, not by its trace ID', async () => {
    const exporter = new InMemorySpanExporter();
    const tracing = await startTracing({ service: 'test', exporter, env: { OTEL_TRACES_SAMPLER_ARG: '0.5' } });
    const app = await contextApp(false);
    try {
      const kept = (traceId: string) => exporter.getFinishedSpans().some((s) => s.spanContext().traceId === traceId);
      // An ID the trace ID rule keeps, with randomness below the half: not kept; and the other way round.
      await app.inject({ url: '/work', headers: headers(KEPT_AT_HALF, `ot=rv:${NEVER}`) });
      await app.inject({ url: '/work', headers: headers(DROPPED_AT_HALF, `ot=th:0;rv:${ALWAYS}`) });
      expect(kept(KEPT_AT_HALF)).toBe(false);
      expect(kept(DROPPED_AT_HALF)).toBe(true);
    } finally {
      await app.close();
      await tracing?.shutdown();
    }
  });

  it('draws at the edge whether a trace is kept, whatever the caller sent, and carries the draw on', async () => {
    const exporter = new InMemorySpanExporter();
    const tracing = await startTracing({ service: 'test', exporter, env: { OTEL_TRACES_SAMPLER_ARG: '0.5' } });
    const app = await contextApp(true);
    try {
      // 40 callers doing all they can to be kept: IDs the trace ID rule keeps, "sampled", the highest randomness.
      const ids = Array.from({ length: 40 }, (_, i) => (i + 1).toString(16).padStart(32, '0'));
      let kept = 0;
      for (const traceId of ids) {
        const res = await app.inject({ url: '/work', headers: headers(traceId, `ot=rv:${ALWAYS},vendor=theirs`) });
        const carried = res.json() as { traceparent: string; tracestate: string };
        const spans = exporter.getFinishedSpans().filter((s) => s.spanContext().traceId === traceId);
        // The edge's own draw, first in the tracestate it carries on, the caller's other entries after it.
        const rv = /^ot=rv:([0-9a-f]{14}),vendor=theirs$/.exec(carried.tracestate)?.[1];
        expect(rv, carried.tracestate).toBeDefined();
        expect(rv).not.toBe(ALWAYS);
        // Kept when the draw is in the upper half (2^55 and above), and said so to the next hop; the span is the
        // caller's child either way.
        const keeps = BigInt(`0x${rv}`) >= 2n ** 55n;
        expect(spans.length, traceId).toBe(keeps ? 1 : 0);
        expect(carried.traceparent).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-${keeps ? '01' : '00'}$`));
        if (keeps) {
          expect(spans[0]?.parentSpanContext?.spanId).toBe(CALLER_SPAN);
          kept++;
        }
      }
      // Some kept, some not (all 40 or none at a half: once in 2^39 runs).
      expect(kept).toBeGreaterThan(0);
      expect(kept).toBeLessThan(40);
    } finally {
      await app.close();
      await tracing?.shutdown();
    }
  });

  it("replaces a caller's randomness in the tracestate the edge sends on without a span of its own", () => {
    expect(edgeTraceState(`ot=th:0;rv:${ALWAYS},vendor=theirs`)).toMatch(/^ot=rv:[0-9a-f]{14},vendor=theirs$/);
    expect(edgeTraceState(`ot=rv:${ALWAYS}`)).not.toContain(ALWAYS);
    expect(edgeTraceState(undefined)).toMatch(/^ot=rv:[0-9a-f]{14}$/);
    // Another `ot` later in the list (OpenTelemetry's parser keeps the last of a key), however spaced: gone.
    for (const sneaky of [
      `vendor=theirs,\u00a0ot=rv:${ALWAYS}`,
      `a=1, \tot=rv:${ALWAYS}`,
      ['a=1', `ot=rv:${ALWAYS}`],
    ]) {
      const sent = edgeTraceState(sneaky);
      expect(sent).toMatch(/^ot=rv:[0-9a-f]{14}(,|$)/);
      expect(sent).not.toContain(ALWAYS);
    }
    // A full list, or a long one: the edge's entry first all the same, within W3C's 32 entries and 512 characters
    // (the oldest of the caller's dropped).
    const full = Array.from({ length: 32 }, (_, i) => `v${i}=x`).join(',');
    const long = `a=${'x'.repeat(250)},b=${'y'.repeat(250)}`;
    for (const list of [full, long]) {
      const sent = edgeTraceState(list);
      expect(sent).toMatch(/^ot=rv:[0-9a-f]{14},/);
      expect(sent.split(',').length).toBeLessThanOrEqual(32);
      expect(sent.length).toBeLessThanOrEqual(512);
    }
    expect(edgeTraceState(long)).toMatch(/^ot=rv:[0-9a-f]{14},a=x{250}$/);
  });

  it('carries its draw on under a caller whose tracestate is full', async () => {
    const exporter = new InMemorySpanExporter();
    const tracing = await startTracing({ service: 'test', exporter, env: { OTEL_TRACES_SAMPLER_ARG: '0.5' } });
    const app = await contextApp(true);
    try {
      const full = Array.from({ length: 32 }, (_, i) => `v${i}=x`).join(',');
      const res = await app.inject({ url: '/work', headers: headers(KEPT_AT_HALF, full) });
      const carried = res.json() as { traceparent: string; tracestate: string };
      expect(carried.tracestate).toMatch(/^ot=rv:[0-9a-f]{14},v0=x,/);
      expect(carried.tracestate.split(',')).toHaveLength(32);
    } finally {
      await app.close();
      await tracing?.shutdown();
    }
  });
});

describe('tracing on: NATS messages', () => {
  it("opens a span for one item of a batch: under the sender's span, or a trace of its own, failed with the item", async () => {
    const opts = { kind: 'consumer', tracer: 'batch consumer', untraced: 'new' } as const;
    expect(startSpanOf(undefined, 'process off', opts)).toBeUndefined();
    const exporter = new InMemorySpanExporter();
    const tracing = await startTracing({ service: 'test', exporter });
    try {
      const sender = trace.getTracer('sender').startSpan('send');
      const carrier: Record<string, string> = {};
      propagation.inject(trace.setSpan(ROOT_CONTEXT, sender), carrier);
      sender.end();
      const opened = startSpanOf(carrier, 'process traced', opts);
      // A line logged about the item outside its span names the span's trace and ID.
      const fields = opened?.logFields();
      opened?.end();
      startSpanOf(undefined, 'process untraced', opts)?.end(new Error('refused'));
      expect(startSpanOf(undefined, 'process unopened', { ...opts, untraced: 'none' })).toBeUndefined();
      const spans = exporter.getFinishedSpans().filter((s) => s.instrumentationScope.name === 'batch consumer');
      expect(spans.map((s) => s.name)).toEqual(['process traced', 'process untraced']);
      const [traced, untraced] = spans;
      expect(traced?.parentSpanContext?.spanId).toBe(sender.spanContext().spanId);
      expect(traced?.spanContext().traceId).toBe(sender.spanContext().traceId);
      expect(fields).toEqual({ trace_id: sender.spanContext().traceId, span_id: traced?.spanContext().spanId });
      expect(traced?.status.code).toBe(0 /* UNSET */);
      expect(untraced?.parentSpanContext).toBeUndefined();
      expect(untraced?.status).toMatchObject({ code: 2 /* ERROR */, message: 'refused' });
      expect(untraced?.events.map((e) => e.name)).toEqual(['exception']);
    } finally {
      await tracing?.shutdown();
    }
  });

  it("logs each message's lines with its trace: the sender's when it carries one, else one of its own", async () => {
    const exporter = new InMemorySpanExporter();
    const tracing = await startTracing({ service: 'test', exporter });
    const logs = captureLogs();
    const logger = createLogger({ service: 'test', instanceId: 'i-1', level: 'info', destination: logs.destination });
    const suffix = randomBytes(4).toString('hex');
    const stream = `TEST_TRACED_${suffix}`;
    const publisher = (await connectPublisher({
      url: testEnv.natsUrl,
      credentials: testEnv.natsCredentials,
      name: 'traced-consumer-test',
      stream: { name: stream, subjects: [`test.traced.${suffix}.>`] },
    })) as NatsPublisher;
    const handled: string[] = [];
    const consumer = startDurableConsumer({
      connection: publisher.connection,
      name: 'traced consumer',
      what: 'test message',
      durable: 'traced',
      filter: `test.traced.${suffix}.>`,
      stream: { ensure: stream },
      schema: z.object({ id: z.string() }),
      async handle(body) {
        logger.info({ id: body.id }, 'handling');
        handled.push(body.id);
        return 'ack';
      },
      logger,
    });
    try {
      await consumer.ready;
      // One sent inside a trace (its producer's context in the headers), one sent outside any, one malformed.
      const sender = trace.getTracer('sender').startSpan('send');
      const senderContext = trace.setSpan(ROOT_CONTEXT, sender);
      await context.with(senderContext, () => publisher.publish(`test.traced.${suffix}.a`, { id: 'traced' }));
      sender.end();
      await publisher.publish(`test.traced.${suffix}.b`, { id: 'untraced' });
      await publisher.publish(`test.traced.${suffix}.c`, { nothing: true });
      await expect.poll(() => handled.length, { timeout: 30_000 }).toBe(2);
      await expect
        .poll(() => logs.lines().filter((l) => l.msg === 'malformed test message dropped'), {
          timeout: 30_000,
        })
        .toHaveLength(1);

      const consumerSpans = () =>
        exporter.getFinishedSpans().filter((s) => s.instrumentationScope.name === 'traced consumer');
      await expect.poll(() => consumerSpans().length, { timeout: 30_000 }).toBe(3);
      const line = (id: string) => logs.lines().find((l) => l.msg === 'handling' && l.id === id)!;
      // The traced message: its handler's line names the sender's trace and the consumer span under the sender's span.
      const traced = consumerSpans().find((s) => s.spanContext().spanId === line('traced').span_id)!;
      expect(traced.parentSpanContext?.spanId).toBe(sender.spanContext().spanId);
      expect(line('traced').trace_id).toBe(sender.spanContext().traceId);
      // The untraced one and the malformed one: each in a consumer span of a trace of its own.
      const untraced = consumerSpans().find((s) => s.spanContext().spanId === line('untraced').span_id)!;
      expect(untraced.parentSpanContext).toBeUndefined();
      expect(line('untraced').trace_id).toBe(untraced.spanContext().traceId);
      const malformed = logs.lines().find((l) => l.msg === 'malformed test message dropped')!;
      const dropped = consumerSpans().find((s) => s.spanContext().spanId === malformed.span_id)!;
      expect(dropped.status.code).toBe(2 /* ERROR */);
      expect(new Set(consumerSpans().map((s) => s.spanContext().traceId)).size).toBe(3);
    } finally {
      await consumer.stop();
      await (await jetstreamManager(publisher.connection)).streams.delete(stream).catch(() => {});
      await publisher.close();
      await tracing?.shutdown();
    }
  });
});
