/**
 * When tracing is on: only with an OTLP endpoint (or an exporter a test gives), never with OTEL_SDK_DISABLED; off,
 * nothing is started, and the apps' hooks and the outbox's trace context stay out of the way (the outbox test checks
 * that an event keeps none). tests/tracing.test.ts follows one rental through every hop with tracing on.
 */
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

  it('starts nothing when it is off', () => {
    expect(startTracing({ service: 'test', env: {} })).toBeUndefined();
    expect(tracingOn()).toBe(false);
  });
});
