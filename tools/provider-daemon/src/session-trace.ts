/**
 * A session's trace in the daemon's reports on it. Billing records the W3C trace context of the request that started a
 * session and hands it to the machine's daemon in its list of running sessions (`trace_context`); every report the
 * daemon sends on the session, usage (NATS or HTTP) and workload states (HTTP), continues that trace:
 *
 * - tracing on here (`OTEL_EXPORTER_OTLP_ENDPOINT`): in a span of the daemon's own under the session's context (a
 *   producer span for a NATS message, an internal one around an HTTP request, whose client span the undici
 *   instrumentation adds); the report carries that span's context (the publisher's headers, the request's
 *   `traceparent`), and billing's consumer or server span is its child;
 * - tracing off here: the session's context itself, passed on untouched, so that billing's spans still join the
 *   rental's trace.
 *
 * A session billing hands no context for (tracing off at billing) is reported outside any trace, as before. Reports
 * of a session whose trace is not kept (its context's sampled flag unset: no hop makes a span of it) are batched with
 * those (`kept`); over NATS JetStream, one message a report, they still carry its context.
 */
import { inSpanOf, tracingOn } from '@gpu/common';

/** A W3C trace context: `traceparent`, and `tracestate` when there is one. */
export type TraceContext = Record<string, string>;

/** How many sessions' contexts are kept (a machine runs a few sessions at once; the oldest go first). */
const KEPT = 1024;

/** The tracer the daemon's spans are made by (their instrumentation scope). */
const TRACER = 'provider-daemon';

export class SessionTraces {
  private readonly contexts = new Map<string, TraceContext>();

  /** Keeps the context billing handed for a session (kept after the session leaves the list: its last reports). */
  remember(sessionId: string, context: TraceContext | null | undefined): void {
    if (!context?.traceparent) return;
    this.contexts.delete(sessionId);
    this.contexts.set(sessionId, context);
    if (this.contexts.size > KEPT) this.contexts.delete(this.contexts.keys().next().value as string);
  }

  /** The session's trace context, if billing handed one. */
  of(sessionId: string): TraceContext | undefined {
    return this.contexts.get(sessionId);
  }

  /**
   * Whether the session's trace is kept (its context's sampled flag): a report on one goes alone, in its trace; one
   * of a trace not kept (flags 00: no hop makes a span of it) is batched with the untraced.
   */
  kept(sessionId: string): boolean {
    const flags = this.of(sessionId)?.traceparent?.split('-')[3];
    return flags !== undefined && (Number.parseInt(flags, 16) & 1) === 1;
  }

  /**
   * Runs `send` as a report on the session, in its trace (see the file's comment): `send` gets the headers the report
   * must carry besides what the transport adds itself (the session's context when tracing is off here, none when on).
   */
  report<T>(
    sessionId: string,
    name: string,
    kind: 'producer' | 'internal',
    send: (traceHeaders: TraceContext) => Promise<T>,
  ): Promise<T> {
    const context = this.of(sessionId);
    if (!tracingOn()) return send(context ?? {});
    return inSpanOf(context, name, { kind, tracer: TRACER, attributes: { session_id: sessionId } }, () => send({}));
  }
}
