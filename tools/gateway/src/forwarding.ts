/**
 * What the Node gateway writes itself, the same for an ordinary request (gateway.ts, through @fastify/http-proxy) and
 * a WebSocket upgrade (upgrade.ts, on the raw socket): the headers a service is sent, and the gateway's own problems.
 */
import { STATUS_CODES } from 'node:http';
import { AppError } from '@gpu/common/errors';
import { headersOf, kindOfStatus, problemOf } from '@gpu/common/problem';
import { tracingOn } from '@gpu/common/tracing';

/** Who called, as the gateway saw it: the connection's address and scheme, and the Host the caller wrote. */
export interface Caller {
  address: string | undefined;
  protocol: string;
  host: string | undefined;
}

/**
 * The headers sent on: hop-by-hop `Expect` dropped, the forwarding headers set. The gateway is the platform's first
 * hop, so `X-Forwarded-For` is the caller's own address, whatever the caller wrote there (an address it names is
 * not passed on: the services count by the one the gateway saw), and `X-Real-IP` and `Forwarded` are dropped. `host`:
 * the Host to send instead of the caller's (`localhost` on a service's Unix socket).
 */
export function forwardedHeaders(caller: Caller, headers: Record<string, unknown>, host: string | undefined) {
  const { expect: _expect, 'x-real-ip': _realIp, forwarded: _forwarded, ...rest } = headers;
  // Tracing on, the service continues the trace under the gateway's call (its client span's context, which the undici
  // instrumentation, or upgrade.ts, sends), not under the caller's span: the caller's trace context is not sent as well.
  if (tracingOn()) {
    delete rest.traceparent;
    delete rest.tracestate;
  }
  return {
    ...rest,
    ...(host ? { host } : {}),
    'x-forwarded-for': caller.address ?? '',
    'x-forwarded-proto': caller.protocol,
    'x-forwarded-host': caller.host ?? '',
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
