/**
 * Traces across every hop, with OpenTelemetry's own packages: W3C `traceparent` (and `tracestate`) read from each
 * request and written on each call a service makes (fetch, through the official undici instrumentation), kept with
 * each outbox event while it waits for the relay, carried in NATS message headers, and read again by the consumers.
 * The request ID stays: each server span carries it as `request_id`.
 *
 * Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, and `OTEL_SDK_DISABLED`
 * is not `true`. Off, the SDK is not even loaded and nothing is registered: no hooks on the apps, no
 * instrumentation, no context kept per request, nothing written with outbox events; the only cost is one boolean
 * test per request and per message.
 * On, spans go out in batches over OTLP/HTTP (protobuf) to the endpoint, named by `OTEL_SERVICE_NAME` (default: the
 * service's registry name); `OTEL_TRACES_SAMPLER_ARG` is the fraction of traces kept (default 1), decided alike by
 * every hop, by randomness the gateway draws for each request it takes (sampling.ts), never by a caller's flag or
 * trace ID. Only the W3C trace context travels, never a caller's baggage; a trace not kept travels too (flag 00), so
 * that every hop decides it alike and every log line names its trace (`traceFields`, the loggers' mixin).
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
import type { IdGenerator, SpanExporter } from '@opentelemetry/sdk-trace';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { PlatformSampler, withEdgeRandomness } from './sampling.ts';

export { edgeTraceState, withEdgeRandomness } from './sampling.ts';

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
  /**
   * The IDs of new spans and traces (default: random ones): for spans made after the fact with the IDs another
   * program gave them (the gateway's telemetry receiver, from nginx's lines).
   */
  idGenerator?: IdGenerator;
}

/** Whether tracing is configured by the environment. */
export function tracingConfigured(env: NodeJS.ProcessEnv = process.env): boolean {
  if (env.OTEL_SDK_DISABLED?.toLowerCase() === 'true') return false;
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
}

/** `OTEL_TRACES_SAMPLER_ARG` as a fraction in [0, 1]; 1 when unset, empty or not a number. */
function samplingRatio(env: NodeJS.ProcessEnv): number {
  const text = env.OTEL_TRACES_SAMPLER_ARG?.trim();
  const ratio = text ? Number(text) : Number.NaN;
  return Number.isFinite(ratio) ? Math.min(1, Math.max(0, ratio)) : 1;
}

/**
 * Starts tracing for this process when it is configured (or an exporter is given); undefined when it is off. The SDK
 * is loaded only then: a process that does not trace never loads it.
 */
export async function startTracing(opts: TracingOptions): Promise<Tracing | undefined> {
  const env = opts.env ?? process.env;
  if (!opts.exporter && !tracingConfigured(env)) return undefined;
  if (on) throw new Error('tracing was started already in this process');
  const [sdk, { AsyncLocalStorageContextManager }, { W3CTraceContextPropagator }, resources, semconv] =
    await Promise.all([
      import('@opentelemetry/sdk-trace'),
      import('@opentelemetry/context-async-hooks'),
      import('@opentelemetry/core'),
      import('@opentelemetry/resources'),
      import('@opentelemetry/semantic-conventions'),
    ]);
  const [{ registerInstrumentations }, { UndiciInstrumentation }] = await Promise.all([
    import('@opentelemetry/instrumentation'),
    import('@opentelemetry/instrumentation-undici'),
  ]);
  const exporter = opts.exporter ?? new (await import('@opentelemetry/exporter-trace-otlp-proto')).OTLPTraceExporter();
  // The fraction of traces kept is decided by the gateway's randomness, carried in the trace's `tracestate`, else by
  // the trace ID, the same way in every hop: a caller's "sampled" flag does not make the platform trace a request, nor
  // its "not sampled" flag keep the platform from tracing its share, and a caller choosing its trace IDs (or an `rv`
  // of its own) chooses nothing either (sampling.ts). A span under a parent of this process follows the parent.
  const fraction = samplingRatio(env);
  const ratio = new PlatformSampler(fraction, new sdk.TraceIdRatioBasedSampler(fraction));
  const provider = new sdk.TracerProvider({
    resource: resources.resourceFromAttributes({
      [semconv.ATTR_SERVICE_NAME]: env.OTEL_SERVICE_NAME || opts.service,
    }),
    sampler: new sdk.ParentBasedSampler({ root: ratio, remoteParentSampled: ratio, remoteParentNotSampled: ratio }),
    ...(opts.idGenerator ? { idGenerator: opts.idGenerator } : {}),
    spanProcessors: [
      opts.exporter ? new sdk.SimpleSpanProcessor({ exporter }) : new sdk.BatchSpanProcessor({ exporter }),
    ],
  });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  // The trace context only: a caller's baggage is not carried into the platform's calls, events and messages.
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
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

/**
 * A carrier of the active trace context (`traceparent`, `tracestate`), or undefined when tracing is off or no span is
 * active. A trace not kept is carried too (its flag says so): the next hop decides it by the same trace ID, and its
 * log lines name the same trace.
 */
export function activeTraceContext(): Record<string, string> | undefined {
  if (!on) return undefined;
  const span = trace.getSpan(context.active());
  if (!span || !trace.isSpanContextValid(span.spanContext())) return undefined;
  const carrier: Record<string, string> = {};
  propagation.inject(context.active(), carrier);
  return carrier.traceparent ? carrier : undefined;
}

/**
 * The active span's `trace_id` and `span_id`, for a log line (every logger's mixin, logger.ts): a line written inside a
 * request or a message names its trace and span, kept or not. None when tracing is off or outside any span.
 */
export function traceFields(): { trace_id?: string; span_id?: string } {
  if (!on) return {};
  const span = trace.getSpan(context.active());
  if (!span) return {};
  const { traceId, spanId } = span.spanContext();
  return trace.isSpanContextValid(span.spanContext()) ? { trace_id: traceId, span_id: spanId } : {};
}

/** Marks the active span failed (tracing on), with the error that made it so, for work that goes on after it. */
export function markSpanFailed(err: unknown): void {
  if (!on) return;
  const span = trace.getSpan(context.active());
  if (!span) return;
  if (err instanceof Error) span.recordException(err);
  span.setStatus({ code: SpanStatusCode.ERROR, ...(err instanceof Error ? { message: err.message } : {}) });
}

/** A span `inSpanOf` makes. */
export interface SpanOptions {
  kind: 'producer' | 'consumer' | 'internal';
  /** The tracer's name (the instrumentation scope: the service, the consumer, `outbox-relay`). */
  tracer: string;
  attributes?: Record<string, string | number>;
  /**
   * Without a carried trace context: `none` (the default) runs `fn` in no trace, `new` in a span of a trace of its own
   * (a message is a unit of work: its log lines name a trace as a request's do).
   */
  untraced?: 'none' | 'new';
}

const SPAN_KINDS = { producer: SpanKind.PRODUCER, consumer: SpanKind.CONSUMER, internal: SpanKind.INTERNAL } as const;

/** A span `startSpanOf` opened; its opener ends it with the work's outcome. */
export interface OpenSpan {
  end(err?: unknown): void;
  /**
   * Its `trace_id` and `span_id`, for a log line written about its work outside it (the loggers' mixin names only the
   * active span's, and a span `startSpanOf` opens is never made active).
   */
  logFields(): { trace_id: string; span_id: string };
}

/** The span `inSpanOf` and `startSpanOf` open, and its parent context; undefined where they open none. */
function openSpan(carrier: Record<string, string> | undefined, name: string, opts: SpanOptions) {
  if (!on || (!carrier?.traceparent && opts.untraced !== 'new')) return undefined;
  const parent = carrier?.traceparent ? propagation.extract(ROOT_CONTEXT, carrier) : ROOT_CONTEXT;
  const span = tracer(opts.tracer).startSpan(
    name,
    { kind: SPAN_KINDS[opts.kind], attributes: opts.attributes },
    parent,
  );
  return { span, parent };
}

/**
 * Opens a span as `inSpanOf` does, for work that does not run in it (one item of a batch written together): the
 * caller ends it, with the item's error when it failed. Undefined when `inSpanOf` would open none.
 */
export function startSpanOf(
  carrier: Record<string, string> | undefined,
  name: string,
  opts: SpanOptions,
): OpenSpan | undefined {
  const span = openSpan(carrier, name, opts)?.span;
  if (!span) return undefined;
  return {
    end(err?: unknown) {
      if (err !== undefined) {
        if (err instanceof Error) span.recordException(err);
        span.setStatus({ code: SpanStatusCode.ERROR, ...(err instanceof Error ? { message: err.message } : {}) });
      }
      span.end();
    },
    logFields() {
      const { traceId, spanId } = span.spanContext();
      return { trace_id: traceId, span_id: spanId };
    },
  };
}

/**
 * Runs `fn` in a span of its own whose parent is the trace context `carrier` holds (an outbox event's, a message's
 * headers, a session's), ending it with `fn`'s outcome; `fn` alone when tracing is off, and when there is no context
 * unless `untraced: 'new'`.
 */
export async function inSpanOf<T>(
  carrier: Record<string, string> | undefined,
  name: string,
  opts: SpanOptions,
  fn: () => Promise<T>,
): Promise<T> {
  if (!on) return fn();
  const opened = openSpan(carrier, name, opts);
  // Untraced work runs in no trace, or in one of its own: never in that of whatever request woke the relay or the
  // consumer.
  if (!opened) return context.with(ROOT_CONTEXT, fn);
  const { span, parent } = opened;
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
 * `edge`: the app is where requests enter the platform (the gateway): whether each request's trace is kept is drawn
 * afresh, whatever the caller's `tracestate` says (sampling.ts).
 */
export const tracingHooks = fp(
  async (app: FastifyInstance, opts: { service: string; edge?: boolean }) => {
    if (!on) return;
    const serverTracer = tracer(opts.service);
    const enter = (request: FastifyRequest, _reply: FastifyReply, done: () => void) => {
      if (request.traceSpan) context.with(request.traceSpan.context, done);
      else done();
    };
    app.addHook('onRequest', (request, reply, done) => {
      const extracted = propagation.extract(ROOT_CONTEXT, request.headers);
      const parent = opts.edge ? withEdgeRandomness(extracted) : extracted;
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
      // A response cut off (a download whose store failed, a hijacked reply destroyed) ends its span too.
      reply.raw.once('close', () => {
        if (request.traceSpan?.span !== span) return;
        if (!reply.raw.writableFinished)
          span.setStatus({ code: SpanStatusCode.ERROR, message: 'the response was cut off' });
        span.end();
        request.traceSpan = undefined;
      });
      context.with(spanContext, done);
    });
    // The body was read in between (stream events, outside the request's context): the handler runs in it again.
    app.addHook('preValidation', enter);
    app.addHook('preHandler', enter);
    app.addHook('onResponse', (request, reply, done) => {
      const traced = request.traceSpan;
      if (!traced) return done();
      traced.span.setAttribute('http.response.status_code', reply.statusCode);
      if (reply.statusCode >= 500) traced.span.setStatus({ code: SpanStatusCode.ERROR });
      request.traceSpan = undefined;
      // The hooks after this one and the request's last log line ("request completed") run in the span's context, so
      // that they name it; it ends once they are under way.
      try {
        context.with(traced.context, done);
      } finally {
        traced.span.end();
      }
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
