/**
 * Traces across every hop, with OpenTelemetry's own packages: W3C `traceparent` (and `tracestate`) read from each
 * request and written on each call a service makes (fetch, through the official undici instrumentation), kept with
 * each outbox event while it waits for the relay, carried in NATS message headers, and read again by the consumers.
 * The request ID stays: each server span carries it as `request_id`.
 *
 * Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, and `OTEL_SDK_DISABLED`
 * is not `true`. Off, nothing is registered: no hooks on the apps, no instrumentation, no context kept per request,
 * nothing written with outbox events; the only cost is one boolean test per request and per message.
 * On, spans go out in batches over OTLP/HTTP (protobuf) to the endpoint, named by `OTEL_SERVICE_NAME` (default: the
 * service's registry name); `OTEL_TRACES_SAMPLER_ARG` samples that fraction of new traces (default 1), and a trace
 * begun by a caller follows the caller's decision.
 */
import {
  type Context,
  context,
  propagation,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  trace,
} from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { CompositePropagator, W3CBaggagePropagator, W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { UndiciInstrumentation } from '@opentelemetry/instrumentation-undici';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  BatchSpanProcessor,
  ParentBasedSampler,
  SimpleSpanProcessor,
  type SpanExporter,
  TraceIdRatioBasedSampler,
  TracerProvider,
} from '@opentelemetry/sdk-trace';
import { ATTR_SERVICE_NAME } from '@opentelemetry/semantic-conventions';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';

/** Whether tracing was started in this process. */
let on = false;

export interface Tracing {
  /** Sends the spans still waiting, then stops. */
  shutdown(): Promise<void>;
}

export interface TracingOptions {
  /** The service's name (`billing-service`): the resource's `service.name` unless OTEL_SERVICE_NAME says otherwise. */
  service: string;
  env?: NodeJS.ProcessEnv;
  /** Where spans go instead of OTLP, each as it ends (tests: the SDK's in-memory exporter). Starts tracing. */
  exporter?: SpanExporter;
}

/** Whether tracing is configured by the environment. */
export function tracingConfigured(env: NodeJS.ProcessEnv = process.env): boolean {
  if (env.OTEL_SDK_DISABLED?.toLowerCase() === 'true') return false;
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
}

/** Starts tracing for this process when it is configured (or an exporter is given); undefined when it is off. */
export function startTracing(opts: TracingOptions): Tracing | undefined {
  const env = opts.env ?? process.env;
  if (!opts.exporter && !tracingConfigured(env)) return undefined;
  if (on) throw new Error('tracing was started already in this process');
  const ratio = Number(env.OTEL_TRACES_SAMPLER_ARG ?? '1');
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ [ATTR_SERVICE_NAME]: env.OTEL_SERVICE_NAME || opts.service }),
    sampler: new ParentBasedSampler({
      root: new TraceIdRatioBasedSampler(Number.isFinite(ratio) ? Math.min(1, Math.max(0, ratio)) : 1),
    }),
    spanProcessors: [
      opts.exporter
        ? new SimpleSpanProcessor({ exporter: opts.exporter })
        : new BatchSpanProcessor({ exporter: new OTLPTraceExporter() }),
    ],
  });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(
    new CompositePropagator({ propagators: [new W3CTraceContextPropagator(), new W3CBaggagePropagator()] }),
  );
  trace.setGlobalTracerProvider(provider);
  // Every fetch (undici) a service makes: a client span, and `traceparent` on the request.
  const stopInstrumentations = registerInstrumentations({
    tracerProvider: provider,
    instrumentations: [new UndiciInstrumentation()],
  });
  on = true;
  return {
    async shutdown() {
      stopInstrumentations();
      await provider.shutdown();
      trace.disable();
      propagation.disable();
      context.disable();
      on = false;
    },
  };
}

/** Whether spans are being made in this process. */
export function tracingOn(): boolean {
  return on;
}

const tracer = (name: string): Tracer => trace.getTracer(name);

/** A carrier of the active trace context (`traceparent`, `tracestate`), or undefined when tracing is off. */
export function activeTraceContext(): Record<string, string> | undefined {
  if (!on) return undefined;
  const carrier: Record<string, string> = {};
  propagation.inject(context.active(), carrier);
  return carrier.traceparent ? carrier : undefined;
}

/**
 * Runs `fn` in a span of its own whose parent is the trace context `carrier` holds (an outbox event's, a message's
 * headers), ending it with `fn`'s outcome; `fn` alone when tracing is off or there is no context.
 */
export async function inSpanOf<T>(
  carrier: Record<string, string> | undefined,
  name: string,
  opts: { kind: 'producer' | 'consumer'; tracer: string; attributes?: Record<string, string | number> },
  fn: () => Promise<T>,
): Promise<T> {
  if (!on || !carrier?.traceparent) return fn();
  const parent = propagation.extract(ROOT_CONTEXT, carrier);
  const span = tracer(opts.tracer).startSpan(
    name,
    { kind: opts.kind === 'producer' ? SpanKind.PRODUCER : SpanKind.CONSUMER, attributes: opts.attributes },
    parent,
  );
  try {
    return await context.with(trace.setSpan(parent, span), fn);
  } catch (err) {
    span.recordException(err as Error);
    span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error).message });
    throw err;
  } finally {
    span.end();
  }
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The request's server span and its context (tracing on only). */
    traceSpan?: { span: Span; context: Context };
  }
}

/**
 * A server span per request, its parent the caller's `traceparent`: `GET /providers/:id`, with the method, route,
 * status and request ID. The handler runs in it, so the service's calls and events belong to it. Off: no hooks.
 */
export const tracingHooks = fp(
  async (app: FastifyInstance, opts: { service: string }) => {
    if (!on) return;
    const serverTracer = tracer(opts.service);
    const enter = (request: FastifyRequest, _reply: FastifyReply, done: () => void) => {
      if (request.traceSpan) context.with(request.traceSpan.context, done);
      else done();
    };
    app.addHook('onRequest', (request, _reply, done) => {
      const parent = propagation.extract(ROOT_CONTEXT, request.headers);
      const route = request.routeOptions.url ?? 'unknown route';
      const span = serverTracer.startSpan(
        `${request.method} ${route}`,
        {
          kind: SpanKind.SERVER,
          attributes: {
            'http.request.method': request.method,
            'http.route': route,
            'url.path': request.url.split('?')[0] ?? '',
            request_id: request.id,
          },
        },
        parent,
      );
      const spanContext = trace.setSpan(parent, span);
      request.traceSpan = { span, context: spanContext };
      context.with(spanContext, done);
    });
    // The body was read in between (stream events, outside the request's context): the handler runs in it again.
    app.addHook('preValidation', enter);
    app.addHook('preHandler', enter);
    app.addHook('onResponse', (request, reply, done) => {
      const span = request.traceSpan?.span;
      if (span) {
        span.setAttribute('http.response.status_code', reply.statusCode);
        if (reply.statusCode >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
        span.end();
        request.traceSpan = undefined;
      }
      done();
    });
    app.addHook('onRequestAbort', (request, done) => {
      const span = request.traceSpan?.span;
      if (span) {
        span.setStatus({ code: SpanStatusCode.ERROR, message: 'the client went away' });
        span.end();
        request.traceSpan = undefined;
      }
      done();
    });
  },
  { name: 'gpu-tracing' },
);
