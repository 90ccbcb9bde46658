/**
 * Upgrades through the Node gateway: a renter's shell, exec and port-forwards into a rented workload, a provider
 * daemon's stream to billing and its dial-backs. On every routed path (the route table's prefixes: the service decides
 * whether it takes an upgrade there, no list of such paths is kept here) an HTTP/1.1 `Upgrade: websocket` request, or
 * `Upgrade: tcp` (a raw byte stream: a forwarded port's bytes, @gpu/common/raw-upgrade), goes to the path's service with the headers an ordinary request gets (forwarding.ts: `X-Forwarded-*`, the request and
 * correlation IDs, the trace); the service's answer comes back as it is, its 101 and then the bytes both ways until
 * either side closes, or its refusal (a 401 problem) and the connection closed. The gateway parses no frame: it passes
 * bytes, as nginx and Envoy do.
 *
 * - On a port host (routes.ts, `PORT_HOST`) every path is billing's, sent as written with the caller's Host; a name
 *   under `ports.` that is no port host gets the gateway's 404, as an ordinary request there.
 * - A path no service takes (a SERVICE_ONLY one included) and the gateway's own paths get exactly what an ordinary
 *   request there gets (the gateway answers it as one, through its own routes: a 404 `ROUTE_NOT_FOUND`, `/health`),
 *   written on the raw socket and the connection closed. A path with a dot segment (forwarding.ts `hasDotSegment`) is
 *   a 400 problem (`BAD_REQUEST`), as for ordinary requests, wherever it lies.
 * - An upgrade to anything else (`h2c`, ...) is a 400 problem (`BAD_REQUEST`), as is `tcp` on a port host (a browser's
 *   origin takes WebSockets only). A raw stream keeps TCP's half-close: either side's end passes as the other's.
 * - A service that cannot be reached is a 502 problem (`BAD_GATEWAY`), one that does not answer the upgrade within
 *   `answerTimeout` a 504 (`UPSTREAM_TIMEOUT`), as for ordinary requests.
 * - Timeouts: an upgraded stream is exempt from the gateway's request timeouts (Node's `requestTimeout`,
 *   `keepAliveTimeout`, undici's header and body limits never see it); it is closed when no byte has passed either way
 *   for `idleTimeout` (1 hour by default: a shell may sit idle that long; a client that wants longer sends pings).
 * - Metrics and traces: an upgrade counts as one request (`gateway_requests_total`, status 101, its duration the
 *   stream's whole life, as nginx and Envoy count it), its server span and the client span of its call to the service
 *   lasting as long (tracing on); a refusal counts with its status.
 * - `app.close()` (SIGTERM) closes the open streams at once rather than wait up to an hour for them.
 */
import { request as httpRequest, type IncomingMessage, type OutgoingHttpHeaders } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { correlationIdOf } from '@gpu/common/request-context';
import { tracingOn, withEdgeRandomness } from '@gpu/common/tracing';
import { context, propagation, ROOT_CONTEXT, type Span, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import type { FastifyInstance } from 'fastify';
import { answer, endToEnd, forwardedHeaders, hasDotSegment, head, type RawHeaders, rawProblem } from './forwarding.ts';
import { hostKindOf, SERVICES, type Service } from './routes.ts';
import type { GatewayMetrics } from './telemetry.ts';
import { routeOf } from './telemetry.ts';

/** The default idle limit of an upgraded stream: an hour with no byte either way. */
export const UPGRADE_IDLE_TIMEOUT_MS = 3_600_000;

export interface UpgradeSettings {
  /** Where a service is reached: its base URL, or its gateway socket (then sent `Host: localhost`). */
  upstreamOf: (service: Service) => { url: string } | { socketPath: string };
  /** The request's ID (the caller's when sane, else a new one: the gateway's `genReqId`). */
  requestId: (req: IncomingMessage) => string;
  metrics: GatewayMetrics;
  /** How long the service may take to answer the upgrade (its 101 or a refusal), in ms. */
  answerTimeout: number;
  /** How long an upgraded stream may pass no byte either way before the gateway closes it, in ms. */
  idleTimeout: number;
}

/** The most the caller may send before the service answers its upgrade (kept until the 101): 64 KiB. */
const EARLY_BYTES_MAX = 64 * 1024;

/** The server span of an upgrade and the client span of its call to the service (tracing on), ended together. */
function upgradeSpans(req: IncomingMessage, route: string, requestId: string) {
  if (!tracingOn()) return undefined;
  const tracer = trace.getTracer('gateway');
  // The platform's edge, as for every request the gateway takes: the trace is kept or not by randomness drawn here.
  const parent = withEdgeRandomness(propagation.extract(ROOT_CONTEXT, req.headers));
  const method = req.method ?? 'GET';
  const server = tracer.startSpan(
    `${method} ${route}`,
    {
      kind: SpanKind.SERVER,
      attributes: {
        'http.request.method': method,
        'http.route': route,
        'url.path': (req.url ?? '/').split('?')[0] ?? '/',
        request_id: requestId,
      },
    },
    parent,
  );
  const client = tracer.startSpan(
    method,
    { kind: SpanKind.CLIENT, attributes: { 'http.request.method': method } },
    trace.setSpan(parent, server),
  );
  const carrier: Record<string, string> = {};
  propagation.inject(trace.setSpan(context.active(), client), carrier);
  return {
    carrier,
    end(status: number) {
      for (const span of [client, server] as Span[]) {
        span.setAttribute('http.response.status_code', status);
        if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
        span.end();
      }
    },
  };
}

/**
 * Takes the gateway server's `upgrade` requests (registered on `app.server`): WebSocket upgrades on routed paths to
 * their services, everything else answered as an ordinary request would be (see the top of this file).
 */
export function proxyUpgrades(app: FastifyInstance, settings: UpgradeSettings): void {
  const open = new Set<Duplex>();
  app.addHook('preClose', (done) => {
    for (const socket of open) socket.destroy();
    done();
  });
  app.server.on('upgrade', (req: IncomingMessage, socket: Duplex, bodyHead: Buffer) => {
    const started = performance.now();
    socket.on('error', () => socket.destroy());
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    const kind = hostKindOf(req.headers.host);
    const { upstream, route } = routeOf(path, undefined, req.headers.host);
    const method = req.method ?? 'GET';
    const count = (status: number) =>
      settings.metrics.observe({ upstream, method, route, status, seconds: (performance.now() - started) / 1000 });
    const id = settings.requestId(req);
    const correlationId = correlationIdOf(req);
    const problem = (status: number, code: string, detail: string) => {
      rawProblem(socket, { status, code, detail, instance: path }, { requestId: id, correlationId });
      count(status);
    };

    const token = (req.headers.upgrade ?? '').trim().toLowerCase();
    if (kind !== 'not-a-port-host' && token !== 'websocket' && !(token === 'tcp' && kind === 'api')) {
      problem(400, 'BAD_REQUEST', 'only WebSocket upgrades, and raw byte streams (tcp) to the API, pass the gateway');
      return;
    }
    // Refused here rather than answered as an ordinary request: the app's inject would resolve the segments first. A
    // port host's path is the workload's, passed as written.
    if (kind === 'api' && hasDotSegment(path)) {
      problem(400, 'BAD_REQUEST', 'a path with . or .. segments is not forwarded');
      return;
    }
    const service = kind === 'not-a-port-host' ? undefined : SERVICES.find((s) => s === upstream);
    if (!service) {
      // The answer an ordinary request gets there (and counted as one, by the gateway's own hooks).
      const { upgrade: _u, connection: _c, 'content-length': _l, 'transfer-encoding': _t, ...headers } = req.headers;
      app
        .inject({
          method: method as 'GET',
          url: req.url ?? '/',
          headers: headers as Record<string, string>,
          remoteAddress: (socket as Socket).remoteAddress ?? '127.0.0.1',
        })
        .then(
          (res) => answer(socket, res.statusCode, res.headers as RawHeaders, res.rawPayload),
          () => socket.destroy(),
        );
      return;
    }

    const target = settings.upstreamOf(service);
    const spans = upgradeSpans(req, route, id);
    // The caller's hop-by-hop headers (its Connection and what it names) stay on its hop (forwardedHeaders); this
    // hop's Connection and Upgrade are set below.
    const headers: OutgoingHttpHeaders = {
      ...forwardedHeaders(
        {
          address: (socket as Socket).remoteAddress,
          protocol: 'encrypted' in socket && socket.encrypted ? 'https' : 'http',
          host: req.headers.host,
          requestId: id,
          correlationId,
        },
        req.headers,
        // A port host's Host goes on as the caller wrote it, whatever its Connection names: billing finds the session
        // and port by it.
        kind === 'port-host' ? req.headers.host : 'socketPath' in target ? 'localhost' : new URL(target.url).host,
      ),
      ...spans?.carrier,
      connection: 'Upgrade',
      upgrade: token,
    } as OutgoingHttpHeaders;
    const url = 'url' in target ? new URL(target.url) : undefined;
    const outgoing = httpRequest({
      ...(url ? { hostname: url.hostname.replace(/^\[|\]$/g, ''), port: url.port || 80 } : {}),
      ...('socketPath' in target ? { socketPath: target.socketPath } : {}),
      method,
      path: req.url,
      headers,
      agent: false,
      timeout: settings.answerTimeout,
    });
    let answered = false;
    const finish = (status: number) => {
      answered = true;
      count(status);
      spans?.end(status);
    };
    const fail = (status: number, code: string, detail: string) => {
      if (answered) return;
      problem(status, code, detail);
      answered = true;
      spans?.end(status);
      outgoing.destroy();
    };
    outgoing.on('timeout', () => {
      // Before the answer a 504; in the middle of a refusal's body, the refusal cut off.
      if (!answered) fail(504, 'UPSTREAM_TIMEOUT', `${service} did not answer in time`);
      else if (!upgraded) {
        outgoing.destroy();
        socket.destroy();
      }
    });
    outgoing.on('error', (err) => {
      app.log.warn({ reqId: id, service, err: err.message }, 'service not reached');
      fail(502, 'BAD_GATEWAY', `${service} did not answer`);
    });
    // What the caller sends before the answer (a raw stream's first bytes) waits here for the 101; past
    // EARLY_BYTES_MAX the caller is held back (its socket paused: TCP carries the wait). A WebSocket caller's end
    // before the answer, like its close, is a caller gone (an HTTP server's socket is half-open: its close would not
    // come), and the call to the service goes too, nothing counted; a raw stream's end is its half-close, passed on
    // after the 101 (the service's answer may still come back), its wait bounded by `answerTimeout`.
    const early: Buffer[] = [];
    let earlyBytes = 0;
    let callerEnded = false;
    const gone = () => {
      if (answered) return;
      answered = true;
      spans?.end(499);
      outgoing.destroy();
      socket.destroy();
    };
    const onEarly = (chunk: Buffer) => {
      early.push(chunk);
      earlyBytes += chunk.length;
      if (earlyBytes > EARLY_BYTES_MAX) (socket as Socket).pause();
    };
    const onEarlyEnd = () => {
      if (token === 'tcp') callerEnded = true;
      else gone();
    };
    socket.on('data', onEarly);
    socket.once('end', onEarlyEnd);
    socket.once('close', gone);
    let upgraded = false;
    // The service declined (its 401 problem, a 404, a 426, or a workload's page on a port host): its answer passes as
    // it is, streamed (never held whole: it may be of any size), then the connection closes.
    outgoing.on('response', (res) => {
      if (answered) return res.resume();
      answered = true;
      socket.off('data', onEarly);
      const status = res.statusCode ?? 502;
      // Its length where the service said it (not beside chunks); else the body ends with the connection.
      const kept = endToEnd(res.headers, [
        'x-request-id',
        'x-correlation-id',
        ...(res.headers['transfer-encoding'] ? ['content-length'] : []),
      ]);
      socket.write(
        head(status, {
          ...(kept as RawHeaders),
          connection: 'close',
          'x-request-id': id,
          'x-correlation-id': correlationId,
        }),
      );
      res.pipe(socket);
      res.on('error', () => socket.destroy());
      // The caller gone (a WebSocket caller's end is seen, as before the answer; its close may never come): the
      // service's answer too. What it sends meanwhile is read and dropped, so that its end is seen.
      const leave = () => {
        res.destroy();
        socket.destroy();
      };
      if (token !== 'tcp') socket.once('end', leave);
      socket.once('close', leave);
      (socket as Socket).resume();
      finish(status);
    });
    outgoing.on('upgrade', (res, upstreamSocket: Socket, upstreamHead: Buffer) => {
      if (answered || socket.destroyed) {
        upstreamSocket.destroy();
        return;
      }
      outgoing.setTimeout(0);
      answered = true;
      upgraded = true;
      // The caller's first bytes go first, then its stream.
      socket.off('data', onEarly);
      socket.off('end', onEarlyEnd);
      (socket as Socket).pause();
      const status = res.statusCode ?? 101;
      const kept = Object.fromEntries(
        Object.entries(res.headers).filter(([name]) => !['x-request-id', 'x-correlation-id'].includes(name)),
      );
      socket.write(head(status, { ...kept, 'x-request-id': id, 'x-correlation-id': correlationId }));
      if (upstreamHead.length > 0) socket.write(upstreamHead);
      if (bodyHead.length > 0) upstreamSocket.write(bodyHead);
      for (const chunk of early) upstreamSocket.write(chunk);
      // A raw stream's caller that half-closed before the 101: its end follows its bytes.
      if (callerEnded) upstreamSocket.end();
      upstreamSocket.setNoDelay(true);
      (socket as Socket).setNoDelay?.(true);
      // A raw stream's half-close passes (the caller's end, then the service's answer still coming back).
      upstreamSocket.allowHalfOpen = true;
      (socket as Socket).allowHalfOpen = true;
      // Every byte either way passes this socket (read from the caller, written to it), so its timer is the stream's.
      (socket as Socket).setTimeout?.(settings.idleTimeout, () => socket.destroy());
      upstreamSocket.setTimeout(0);
      open.add(socket);
      // Either side's end ends the other once what is on its way has been written (a close frame reaches the other
      // side); an error, the idle limit or the gateway's close destroys both. Counted once, as the stream ends.
      let closed = false;
      const ended = () => {
        if (closed) return;
        closed = true;
        open.delete(socket);
        count(status);
        spans?.end(status);
      };
      socket.on('close', () => {
        upstreamSocket.destroySoon();
        ended();
      });
      upstreamSocket.on('close', () => {
        (socket as Socket).destroySoon();
        ended();
      });
      upstreamSocket.on('error', () => socket.destroy());
      socket.on('error', () => upstreamSocket.destroy());
      socket.pipe(upstreamSocket).pipe(socket);
    });
    outgoing.end();
  });
}
