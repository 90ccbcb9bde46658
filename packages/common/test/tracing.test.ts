/**
 * When tracing is on: only with an OTLP endpoint (or an exporter a test gives), never with OTEL_SDK_DISABLED; off,
 * nothing is started, and the apps' hooks and the outbox's trace context stay out of the way (the outbox test checks
 * that an event keeps none). tests/tracing.test.ts follows one rental through every hop with tracing on.
 */
import { propagation, ROOT_CONTEXT, trace } from '@opentelemetry/api';
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace';
import { describe, expect, it } from 'vitest';
import { startTracing, tracingConfigured, tracingOn } from '../src/index.ts';

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
