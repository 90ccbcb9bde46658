/**
 * The nginx gateways' spans and metrics. nginx has neither built in where the platform runs it (Debian's nginx, which
 * `pnpm start` runs, has no OpenTelemetry module, and its njs keeps nothing between requests), so deploy/gateway's
 * files have nginx do the trace's part of the work, and this receiver the rest:
 *
 * - nginx (http.conf): continues a caller's valid `traceparent` or begins a trace, gives each request a span ID of its
 *   own, draws the randomness that decides whether the trace is kept, and sends the service `traceparent` with that
 *   span as the parent and `tracestate` with that randomness (platform-api.conf); then, as the request ends, writes
 *   one line of what it did (log_format `platform_telemetry`: trace, span and parent IDs, the randomness, method,
 *   path, status, time taken, request ID, Host) to this receiver as syslog over UDP;
 * - this receiver turns each line into the gateway's server span, with those very IDs, start and end (tracing on:
 *   OTEL_EXPORTER_OTLP_ENDPOINT; kept or not by nginx's randomness, as the service's span is), and counts it
 *   in the gateway's metrics (telemetry.ts), which it serves at `GET /metrics` (nginx passes `/metrics` on to it, for
 *   operators only).
 *
 * A line lost (UDP, a receiver restarting) loses its span and its count, never the request. The receiver listens on
 * loopback under `pnpm start` (UDP on the gateway's own port number, its metrics on a Unix socket) and on the
 * platform's network in docker-compose (tools/gateway/README.md).
 */
import { randomBytes } from 'node:crypto';
import { createSocket, type Socket } from 'node:dgram';
import { mkdirSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { isIP } from 'node:net';
import path from 'node:path';
import type { Logger } from '@gpu/common/logger';
import { withEdgeRandomness } from '@gpu/common/tracing';
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, TraceFlags, trace } from '@opentelemetry/api';
import { GatewayMetrics, routeOf } from './telemetry.ts';

/** One request as nginx's `platform_telemetry` line tells it. */
interface TelemetryLine {
  trace_id: string;
  span_id: string;
  /** The caller's span (empty: the gateway began the trace). */
  parent_span_id: string;
  /**
   * The randomness nginx drew for the request (14 hex digits of `$request_id`), which it sent the service in its
   * `tracestate`: the span is kept as the service's is, by it (common's telemetry/sampling.ts). A line without it is
   * decided by its trace ID.
   */
  rv?: string;
  request_id: string;
  method: string;
  /** The path as the caller sent it (no query). */
  path: string;
  status: number;
  /** Seconds from the request's first byte to the answer's last. */
  request_time: number;
  /** When the request ended (seconds since the epoch, milliseconds exact). */
  msec: number;
  /** Where nginx sent it (`proxy_pass`'s host: an upstream's name), empty for its own answers. */
  proxied: string;
  /** The Host's name as nginx read it (`$host`: a port host's requests count as one route). */
  host: string;
}

const HEX32 = /^[0-9a-f]{32}$/;
const HEX16 = /^[0-9a-f]{16}$/;
const HEX14 = /^[0-9a-f]{14}$/;

/** The line's JSON after the syslog header nginx writes (`<190>Nov 26 08:00:00 gateway: {...}`), if it is one. */
function parseTelemetryLine(datagram: string): TelemetryLine | undefined {
  const start = datagram.indexOf('{');
  if (start < 0) return undefined;
  let line: Partial<TelemetryLine>;
  try {
    line = JSON.parse(datagram.slice(start));
  } catch {
    return undefined;
  }
  const ok =
    typeof line.trace_id === 'string' &&
    HEX32.test(line.trace_id) &&
    typeof line.span_id === 'string' &&
    HEX16.test(line.span_id) &&
    typeof line.parent_span_id === 'string' &&
    (line.parent_span_id === '' || HEX16.test(line.parent_span_id)) &&
    (line.rv === undefined || (typeof line.rv === 'string' && HEX14.test(line.rv))) &&
    typeof line.method === 'string' &&
    typeof line.path === 'string' &&
    typeof line.status === 'number' &&
    Number.isInteger(line.status) &&
    line.status >= 100 &&
    line.status <= 599 &&
    typeof line.request_time === 'number' &&
    typeof line.msec === 'number' &&
    (line.host === undefined || typeof line.host === 'string');
  return ok ? ({ request_id: '', proxied: '', host: '', ...line } as TelemetryLine) : undefined;
}

/**
 * The ID generator the receiver's tracer uses: while a line's span is made (`during`, synchronously), the IDs made are
 * the line's (a trace nginx began takes its trace ID from the line too); at any other time, random ones as the SDK's.
 */
export class LineIds {
  private pending: { traceId: string; spanId: string } | undefined;

  during<T>(ids: { traceId: string; spanId: string }, make: () => T): T {
    this.pending = ids;
    try {
      return make();
    } finally {
      this.pending = undefined;
    }
  }

  generateTraceId(): string {
    return this.pending?.traceId ?? randomBytes(16).toString('hex');
  }

  generateSpanId(): string {
    return this.pending?.spanId ?? randomBytes(8).toString('hex');
  }
}

export interface NginxTelemetryOptions {
  /** Where nginx's lines arrive: UDP `address:port` (an IPv6 address in brackets). */
  syslog: string;
  /** Where the metrics are served: `address:port`, or a Unix socket's path (made anew). */
  metrics: string;
  /** The ID generator `startTracing` was given, when tracing is on: spans are made then. */
  ids?: LineIds;
  logger: Logger;
}

export interface NginxTelemetry {
  metrics: GatewayMetrics;
  /** The UDP port the lines arrive at (the one asked, or the one given for port 0). */
  syslogPort: number;
  /** Where the metrics are served: `http://address:port`, or the socket's path. */
  metricsAt: string;
  close(): Promise<void>;
}

/** `host:port` (`[::1]:port` for IPv6) as its parts. */
function hostPort(address: string): { host: string; port: number } {
  const m = /^\[?([^\]]*?)\]?:(\d+)$/.exec(address);
  if (!m || isIP(m[1] ?? '') === 0) throw new Error(`not an address:port: ${address}`);
  return { host: m[1]!, port: Number(m[2]) };
}

/** Starts receiving nginx's lines and serving the metrics; resolves once both listen. */
export async function startNginxTelemetry(opts: NginxTelemetryOptions): Promise<NginxTelemetry> {
  const metrics = new GatewayMetrics();
  const tracer = trace.getTracer('gateway');
  const record = (line: TelemetryLine) => {
    const { upstream, route } = routeOf(line.path, line.proxied, line.host);
    metrics.observe({ upstream, method: line.method, route, status: line.status, seconds: line.request_time });
    if (!opts.ids) return;
    const endMs = line.msec * 1000;
    // The caller's span, when nginx continued its trace; kept or not by nginx's draw, whatever the caller's flag.
    const caller = line.parent_span_id
      ? trace.setSpanContext(ROOT_CONTEXT, {
          traceId: line.trace_id,
          spanId: line.parent_span_id,
          traceFlags: TraceFlags.NONE,
          isRemote: true,
        })
      : ROOT_CONTEXT;
    const parent = line.rv ? withEdgeRandomness(caller, line.rv) : caller;
    const ids = { traceId: line.trace_id, spanId: line.span_id };
    const span = opts.ids.during(ids, () =>
      tracer.startSpan(
        `${line.method} ${route}`,
        {
          kind: SpanKind.SERVER,
          startTime: endMs - line.request_time * 1000,
          attributes: {
            'http.request.method': line.method,
            'http.route': route,
            'url.path': line.path,
            'http.response.status_code': line.status,
            request_id: line.request_id,
            upstream,
          },
        },
        parent,
      ),
    );
    if (line.status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
    span.end(endMs);
  };

  const { host, port } = hostPort(opts.syslog);
  const socket: Socket = createSocket(isIP(host) === 6 ? 'udp6' : 'udp4');
  // What is not a line of nginx's is dropped, said the first time and every 1000th (the port takes any datagram its
  // host's processes send: none of them can make the log grow without bound).
  let ignored = 0;
  socket.on('message', (datagram) => {
    const line = parseTelemetryLine(datagram.toString('utf8'));
    if (line) record(line);
    else if (ignored++ % 1000 === 0)
      opts.logger.warn(
        { datagram: datagram.toString('utf8').slice(0, 200), times: ignored },
        'not a telemetry line: ignored',
      );
  });
  await new Promise<void>((resolve, reject) => {
    socket.once('error', reject);
    socket.bind(port, host, () => {
      socket.off('error', reject);
      resolve();
    });
  });
  socket.on('error', (err) => opts.logger.error({ err: err.message }, 'telemetry socket error'));

  const server: Server = createServer((request, response) => {
    if (request.method !== 'GET' || request.url?.split('?')[0] !== '/metrics') {
      response.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
      return;
    }
    metrics.metrics().then(
      (text) => response.writeHead(200, { 'content-type': metrics.contentType }).end(text),
      () => response.writeHead(500).end(),
    );
  });
  const onSocket = !/:\d+$/.test(opts.metrics);
  if (onSocket) {
    // Its folder is made as the services make theirs (this user's alone); a socket an earlier life left is replaced.
    mkdirSync(path.dirname(opts.metrics), { recursive: true, mode: 0o700 });
    rmSync(opts.metrics, { force: true });
  }
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    const done = () => {
      server.off('error', reject);
      resolve();
    };
    if (onSocket) server.listen(opts.metrics, done);
    else server.listen(hostPort(opts.metrics).port, hostPort(opts.metrics).host, done);
  });
  const address = server.address();
  return {
    metrics,
    syslogPort: socket.address().port,
    metricsAt:
      typeof address === 'string' || !address
        ? opts.metrics
        : `http://${isIP(address.address) === 6 ? `[${address.address}]` : address.address}:${address.port}`,
    async close() {
      socket.close();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
