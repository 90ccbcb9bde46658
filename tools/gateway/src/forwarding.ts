/**
 * What the Node gateway writes itself, the same for an ordinary request (gateway.ts, through @fastify/http-proxy) and
 * a WebSocket upgrade (upgrade.ts, on the raw socket): the headers a service is sent, and the gateway's own problems.
 */
import { type IncomingHttpHeaders, STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import { AppError } from '@gpu/common/errors';
import { headersOf, kindOfStatus, problemOf } from '@gpu/common/problem';
import { edgeTraceState, tracingOn } from '@gpu/common/tracing';
import type { FastifyRequest } from 'fastify';

/**
 * Who called, as the gateway saw it: the connection's address and scheme, the Host the caller wrote, and the request's
 * and correlation IDs the gateway gave it.
 */
export interface Caller {
  address: string | undefined;
  protocol: string;
  host: string | undefined;
  requestId: string;
  correlationId: string;
}

/** Who called (forwarded on), with the IDs the gateway's first hook gave the request. */
export const callerOf = (request: FastifyRequest): Caller => ({
  address: request.socket.remoteAddress,
  protocol: request.protocol,
  host: request.headers.host,
  requestId: request.id,
  correlationId: String(request.headers['x-correlation-id']),
});

/** Headers of one hop (RFC 9110 7.6.1), never passed on either way; `Transfer-Encoding` is node:http's to write. */
const HOP_BY_HOP = ['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'upgrade', 'transfer-encoding'];

/** `headers` without the hop-by-hop ones, those its `Connection` names too, and `also`. */
export function endToEnd(headers: IncomingHttpHeaders, also: readonly string[] = []): Record<string, unknown> {
  const named = String(headers.connection ?? '')
    .split(',')
    .map((h) => h.trim().toLowerCase());
  const dropped = new Set([...HOP_BY_HOP, ...named, ...also]);
  return Object.fromEntries(Object.entries(headers).filter(([name]) => !dropped.has(name)));
}

/**
 * The headers sent on: hop-by-hop ones dropped (`endToEnd`: node:http and undici frame each request themselves, and
 * undici refuses some of them outright; `Expect` is answered by the gateway), the forwarding headers and IDs set last,
 * so that no header the caller names in `Connection` takes them away. The gateway is the platform's first hop, so
 * `X-Forwarded-For` is the caller's own address, whatever the caller wrote there (an address it names is not passed
 * on: the services count by the one the gateway saw), and `X-Real-IP` and `Forwarded` are dropped. `host`: the Host to
 * send instead of the one in `headers` (`localhost` on a service's Unix socket, the caller's own on a port host).
 */
export function forwardedHeaders(caller: Caller, headers: IncomingHttpHeaders, host: string | undefined) {
  const rest = endToEnd(headers, ['expect', 'x-real-ip', 'forwarded']);
  // Tracing on, the service continues the trace under the gateway's call (its client span's context, which the undici
  // instrumentation, or upgrade.ts, sends), not under the caller's span: the caller's trace context is not sent as well.
  // Tracing off here, the caller's is sent on, with the randomness that decides whether the services keep the trace
  // drawn here in place of any the caller sent (common's telemetry/sampling.ts).
  if (tracingOn()) {
    delete rest.traceparent;
    delete rest.tracestate;
  } else if (rest.traceparent) rest.tracestate = edgeTraceState(headers.tracestate);
  return {
    ...rest,
    ...(host ? { host } : {}),
    'x-forwarded-for': caller.address ?? '',
    'x-forwarded-proto': caller.protocol,
    'x-forwarded-host': caller.host ?? '',
    'x-request-id': caller.requestId,
    'x-correlation-id': caller.correlationId,
  };
}

/**
 * A problem of the gateway's own (the platform's error shape: common's `problemOf`, as every service writes it), with
 * the status the gateway answers (a framework error's own, such as a 405, where no error kind names it): its body and
 * the headers that go with it (`WWW-Authenticate`, `Retry-After` where the kind has one).
 */
export function gatewayProblem(
  status: number,
  code: string,
  detail: string,
  instance: string,
  requestId: string,
): { body: Record<string, unknown>; headers: Record<string, string> } {
  const err = new AppError(kindOfStatus(status), code, detail);
  const body = { ...problemOf(err), status, title: STATUS_CODES[status] ?? 'Error', instance, request_id: requestId };
  return { body, headers: headersOf(err) };
}

/** Headers of an answer written on a raw socket (an answer that closes the connection). */
export type RawHeaders = Record<string, string | number | string[] | undefined>;

/** Headers that belong to a connection, not to a whole answer written here (`answer` sets its own). */
const ANSWER_OWN = new Set(['connection', 'keep-alive', 'transfer-encoding', 'content-length', 'upgrade']);

/** An answer's head, as written on the wire. */
export function head(status: number, headers: RawHeaders): string {
  const lines = [`HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}`];
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    for (const v of Array.isArray(value) ? value : [value]) lines.push(`${name}: ${v}`);
  }
  return `${lines.join('\r\n')}\r\n\r\n`;
}

/** A whole answer on a raw socket, the connection closed after it. */
export function answer(socket: Duplex, status: number, headers: RawHeaders, body: Buffer): void {
  const kept = Object.fromEntries(Object.entries(headers).filter(([name]) => !ANSWER_OWN.has(name.toLowerCase())));
  socket.end(
    Buffer.concat([Buffer.from(head(status, { ...kept, 'content-length': body.length, connection: 'close' })), body]),
  );
}

/** A problem of the gateway's own (`gatewayProblem`) as a whole answer on a raw socket, with the request's IDs. */
export function rawProblem(
  socket: Duplex,
  problem: { status: number; code: string; detail: string; instance: string },
  ids: { requestId: string; correlationId: string },
): void {
  const { body, headers } = gatewayProblem(
    problem.status,
    problem.code,
    problem.detail,
    problem.instance,
    ids.requestId,
  );
  answer(
    socket,
    problem.status,
    {
      ...headers,
      'content-type': 'application/problem+json; charset=utf-8',
      'x-request-id': ids.requestId,
      'x-correlation-id': ids.correlationId,
    },
    Buffer.from(JSON.stringify(body)),
  );
}

/**
 * Whether a path has a dot segment that a gateway would resolve or route by: `..`, plain or percent-encoded, between
 * slashes plain or encoded (`%2e%2e`, `..%2f`: nginx chooses its location by the resolved path), or `.` (`%2e`)
 * between plain slashes (@fastify/reply-from resolves it: `/objects/b/dir/./k` would reach storage as
 * `/objects/b/k`, another object). Such a path is never forwarded (a 400 problem); a key whose slashes are encoded
 * (`runs%2F.%2Fx`, as the client sends keys) is one segment and passes. Object keys with dot segments are reached at
 * the storage service itself.
 */
export function hasDotSegment(path: string): boolean {
  let decoded: string;
  try {
    decoded = decodeURIComponent(path);
  } catch {
    return true;
  }
  if (decoded.replaceAll('\\', '/').split('/').includes('..')) return true;
  return path.split(/[/\\]/).some((segment) => segment.replace(/%2e/gi, '.') === '.');
}
