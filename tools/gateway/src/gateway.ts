/**
 * The platform's one origin for `pnpm start`: a thin reverse proxy built on @fastify/http-proxy (undici underneath),
 * no code of its own between caller and service but the route table and the request ID.
 *
 * - Every public path goes to its service unchanged (`ROUTES`); any other path is a 404 problem. `/health` is the
 *   gateway's own; `/health/<service>` is that service's `/health`, for operators only (`operators`, by the
 *   caller's address: loopback and the private networks unless told), a 403 problem for anyone else.
 * - Bodies stream both ways (an upload of any size is never read into memory, nor a download); every header passes
 *   as it is, `Authorization`, `Range`, `ETag` and `If-None-Match` and a 307's `Location` included; the services
 *   answer for themselves (auth, validation, problems).
 * - `X-Request-ID`: the caller's when it is sane (1-128 of `A-Za-z0-9._:-`), else a new UUID, sent on to the service
 *   and back to the caller, and in the gateway's log line. `X-Correlation-ID` the same way (common's
 *   `correlationIdOf`): on every answer, the gateway's own problems and health included, and on to the service, which
 *   so keeps the one the caller sees. `X-Forwarded-For` is set to the caller's address (what
 *   the caller sent there is replaced), `X-Forwarded-Proto` and `-Host` are set; under `pnpm start` the services
 *   believe it only on the gateway's own Unix sockets (`socketDir`), never from a TCP caller.
 *   `Expect: 100-continue` is answered by the gateway itself, not sent on.
 * - A declared body larger than the path's service takes (`BODY_LIMITS`) is a 413 problem of the gateway's, sent
 *   before a byte goes on; a service's own 413 passes on as it is. Either closes the connection gracefully.
 * - Nothing is retried (a service's 503 reaches the caller, whose client decides); a service that cannot be reached
 *   or does not answer in time is a 502/503/504 problem naming the service, never its address.
 * - Traces and metrics: with tracing on (`startTracing`, OTEL_EXPORTER_OTLP_ENDPOINT) a server span per request
 *   (common's, as every service's: `GET /api/v1/billing/*`), its call to the service a client span under it whose
 *   context the service's `traceparent` carries (the caller's own is not sent on: the service continues the trace
 *   under the gateway's span); every log line of a request names its trace and span. `gateway_requests_total` and
 *   `gateway_request_duration_seconds` (telemetry.ts) count every answer, at `GET /metrics` for operators only.
 * - WebSocket upgrades on every routed path go to the service with the same headers, then bytes both ways until
 *   either side closes, idle for at most an hour (upgrade.ts); upgrades elsewhere get an ordinary request's answer.
 * - Port hosts (routes.ts, `PORT_HOST`: `<session-uuid>-<port>.ports.<domain>`): every request, upgrades included,
 *   goes to billing with its path, query and Host as sent, none of the above routes applying (port-hosts.ts).
 */
import { randomUUID } from 'node:crypto';
import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import path from 'node:path';
import type { Duplex } from 'node:stream';
import proxy from '@fastify/http-proxy';
import { lingerBeforeClose } from '@gpu/common/oversized-body';
import { correlationIdOf, saneId } from '@gpu/common/request-context';
import { RequestLogController } from '@gpu/common/request-logging';
import { traceFields, tracingHooks } from '@gpu/common/tracing';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { callerOf, endToEnd, forwardedHeaders, gatewayProblem, hasDotSegment, rawProblem } from './forwarding.ts';
import { OPERATOR_NETWORKS, operatorsAt } from './operators.ts';
import { forwardPortHosts, portHostUrl } from './port-hosts.ts';
import { bodyLimitOf, hostKindOf, PORT_HOST_SERVICE, ROUTES, type Service } from './routes.ts';
import { GatewayMetrics, routeOf } from './telemetry.ts';
import { proxyUpgrades, UPGRADE_IDLE_TIMEOUT_MS } from './upgrade.ts';

export interface GatewayOptions {
  /** Each service's base URL (`http://127.0.0.1:8000`). */
  upstreams: Record<Service, string>;
  /**
   * A folder holding each service's gateway socket, `<folder>/<service>.sock` (the services' `server.gateway_socket`,
   * as `pnpm start` sets them): the services are reached there instead of at their URLs.
   */
  socketDir?: string;
  /**
   * Who may read `/health/<service>`: addresses or CIDRs, matched against the address the gateway sees (default
   * `OPERATOR_NETWORKS`: loopback and the private networks, as compose's nginx); anyone else gets 403 OPERATORS_ONLY.
   */
  operators?: readonly string[];
  /** Pino level for the gateway's own log lines (one per request at `info`). */
  logLevel?: string;
  /** Where its log lines go (standard output by default; tests read them). */
  logStream?: { write(line: string): void };
  /**
   * Its time limits, in milliseconds: `upstream`, a service's wait for headers and between two chunks of a body (and
   * for its answer to a WebSocket upgrade; 300 s); `keepAlive`, an idle connection's between two requests (72 s);
   * `upgradeIdle`, an upgraded stream's with no byte either way (`UPGRADE_IDLE_TIMEOUT_MS`, 1 hour). An upgraded
   * stream is subject to `upgradeIdle` alone.
   */
  timeouts?: { upstream?: number; keepAlive?: number; upgradeIdle?: number };
}

/** The request's ID: the caller's when sane (common's rule, as every service's), else a new one. */
function requestId(req: IncomingMessage): string {
  return saneId(req.headers['x-request-id']) ?? randomUUID();
}

/** The path the caller sent (its URL's; `request.url` is the one the gateway routed by, port-hosts.ts). */
const pathOf = (request: FastifyRequest) => request.originalUrl.split('?')[0] ?? '';

/**
 * A problem of the gateway's own (forwarding.ts), answered on `reply` with the request's IDs (set here too: a request
 * the framework refused never ran the hooks that set them).
 */
function problem(reply: FastifyReply, request: FastifyRequest, status: number, code: string, detail: string) {
  const { body, headers } = gatewayProblem(status, code, detail, pathOf(request), request.id);
  return reply
    .code(status)
    .headers({ ...headers, 'x-request-id': request.id, 'x-correlation-id': correlationIdOf(request.raw) })
    .type('application/problem+json')
    .send(body);
}

/**
 * The gateway's answer to a request node:http could not read (two `Content-Length`s, one beside a
 * `Transfer-Encoding`, an unknown method or coding, headers past its limit): a problem with new IDs, written on the
 * socket, the connection closed. A caller gone (`ECONNRESET`) is sent nothing.
 */
function clientError(err: Error & { code?: string }, socket: Duplex) {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  const [status, code, detail] =
    err.code === 'HPE_HEADER_OVERFLOW'
      ? [431, 'HEADERS_TOO_LARGE', 'the request headers are larger than the gateway reads']
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? [408, 'REQUEST_TIMEOUT', 'the request did not arrive in time']
        : [400, 'BAD_REQUEST', 'the gateway could not read the request'];
  const id = randomUUID();
  rawProblem(socket, { status, code, detail, instance: '' }, { requestId: id, correlationId: id });
  // Gone once the answer is written, whatever the caller does with its side.
  (socket as Socket).destroySoon();
}

/** What a failure to reach a service answers: 504 for a timeout, 502 otherwise (503 when it refused the connection). */
function upstreamFailure(error: { statusCode?: number; code?: string }): { status: number; code: string } {
  if (error.statusCode === 504) return { status: 504, code: 'UPSTREAM_TIMEOUT' };
  if (error.statusCode === 503) return { status: 503, code: 'SERVICE_UNAVAILABLE' };
  return { status: 502, code: 'BAD_GATEWAY' };
}

/** The gateway's Fastify app (not listening). */
export async function buildGateway(opts: GatewayOptions): Promise<FastifyInstance> {
  const logController = new RequestLogController();
  const app = Fastify({
    // A line written inside a request names its trace and span (tracing on).
    logger: {
      level: opts.logLevel ?? 'info',
      base: { service: 'gateway' },
      mixin: traceFields,
      ...(opts.logStream ? { stream: opts.logStream } : {}),
    },
    logController,
    genReqId: requestId,
    // A port host's request is routed to the port hosts' route, never by the route table (port-hosts.ts).
    rewriteUrl: portHostUrl,
    // Long downloads and uploads: no time limit of the gateway's own (the services keep theirs).
    requestTimeout: 0,
    keepAliveTimeout: opts.timeouts?.keepAlive ?? 72_000,
    return503OnClosing: true,
    // What node:http or the router cannot read is the gateway's problem too, with IDs.
    clientErrorHandler: clientError,
    frameworkErrors: (error, request, reply) =>
      problem(
        reply,
        request,
        400,
        'BAD_REQUEST',
        error.code === 'FST_ERR_BAD_URL' ? 'the request path is not valid percent-encoding' : error.message,
      ),
  });
  // A server span per request (tracing on), its first log line once the span exists. The platform's edge: whether a
  // request's trace is kept is drawn here, whatever the caller sent (common's telemetry/sampling.ts).
  await app.register(tracingHooks, { service: 'gateway', edge: true });
  app.addHook('onRequest', (request, reply, done) => {
    logController.incomingRequestNow(request, reply);
    done();
  });
  const metrics = new GatewayMetrics();
  const upstreamTimeout = opts.timeouts?.upstream ?? 300_000;
  app.addHook('onResponse', (request, reply, done) => {
    metrics.observe({
      ...routeOf(pathOf(request), undefined, request.headers.host),
      method: request.method,
      status: reply.statusCode,
      seconds: reply.elapsedTime / 1000,
    });
    done();
  });
  app.addHook('onRequest', async (request, reply) => {
    request.headers['x-request-id'] = request.id;
    reply.header('x-request-id', request.id);
    const correlationId = correlationIdOf(request.raw);
    request.headers['x-correlation-id'] = correlationId;
    reply.header('x-correlation-id', correlationId);
    if (hostKindOf(request.headers.host) === 'api' && hasDotSegment(pathOf(request))) {
      return problem(reply, request, 400, 'BAD_REQUEST', 'a path with . or .. segments is not forwarded');
    }
    // A declared body larger than the path's service takes is refused here, before a byte of it is sent on; the
    // connection then closes gracefully (the caller finishes sending and reads the 413). A chunked body is counted by
    // the service, whose 413 passes on as it is.
    const declared = Number(request.headers['content-length'] ?? 0);
    const limit = bodyLimitOf(pathOf(request), request.headers.host);
    if (declared > limit) {
      reply.header('connection', 'close');
      lingerBeforeClose(request.raw.socket);
      return problem(
        reply,
        request,
        413,
        'PAYLOAD_TOO_LARGE',
        'the body is larger than the service behind this path takes',
      );
    }
  });
  // Requests the gateway itself refuses (a path it will not forward, such as one with `..` segments): the platform's
  // problem shape too. Set before the proxies are registered, which take the error handler in place then.
  app.setErrorHandler((error: { statusCode?: number; message: string }, request, reply) => {
    const status = error.statusCode && error.statusCode >= 400 && error.statusCode < 600 ? error.statusCode : 500;
    if (status >= 500) request.log.error({ err: error.message }, 'gateway error');
    return problem(
      reply,
      request,
      status,
      status === 400 ? 'BAD_REQUEST' : 'GATEWAY_ERROR',
      status < 500 ? error.message : 'the gateway failed to forward the request',
    );
  });
  app.get('/health', async () => ({ status: 'UP', service: 'gateway' }));
  const isOperator = operatorsAt(opts.operators ?? OPERATOR_NETWORKS);
  // A service's health names its dependencies and their state: for operators only, known by their address.
  const operatorsOnly = async (request: FastifyRequest, reply: FastifyReply) => {
    // `/health/<service>` alone, as nginx and the HTTPRoutes match it: nothing under it is forwarded.
    if (!/^\/health\/[^/]+$/.test(pathOf(request))) {
      return problem(
        reply,
        request,
        404,
        'ROUTE_NOT_FOUND',
        `no service answers ${request.method} ${pathOf(request)} behind the gateway`,
      );
    }
    if (isOperator(request.socket.remoteAddress)) return;
    return problem(reply, request, 403, 'OPERATORS_ONLY', "a service's health is for operators only");
  };
  const metricsForOperators = async (request: FastifyRequest, reply: FastifyReply) => {
    if (isOperator(request.socket.remoteAddress)) return;
    return problem(reply, request, 403, 'OPERATORS_ONLY', "the gateway's metrics are for operators only");
  };
  // The gateway's metrics (telemetry.ts), for operators only: they tell who calls what how often.
  app.get('/metrics', { preHandler: metricsForOperators }, async (_request, reply) =>
    reply.type(metrics.contentType).send(await metrics.metrics()),
  );
  for (const [service, prefixes] of Object.entries(ROUTES) as [Service, readonly string[]][]) {
    // A service's socket is named in the URL as @fastify/reply-from takes it; its Host is then a plain name.
    const socket = opts.socketDir ? path.join(opts.socketDir, `${service}.sock`) : undefined;
    const upstream = socket ? `unix+http://${encodeURIComponent(socket)}` : opts.upstreams[service];
    const host = socket ? 'localhost' : undefined;
    const replyOptions = {
      rewriteRequestHeaders: (req: FastifyRequest, headers: IncomingHttpHeaders) =>
        forwardedHeaders(callerOf(req), headers, host),
      // The service's answer without its hop's headers (its Connection and Keep-Alive are not the caller's).
      rewriteHeaders: (headers: IncomingHttpHeaders) => endToEnd(headers),
      // No retries of the gateway's own: the caller's client retries what is safe to.
      retryDelay: () => null,
      onError: (
        reply: FastifyReply,
        { error }: { error: { statusCode?: number; code?: string; message?: string } },
      ) => {
        const failure = upstreamFailure(error);
        reply.request.log.warn({ service, err: error.message }, 'service not reached');
        return problem(reply, reply.request, failure.status, failure.code, `${service} did not answer`);
      },
    };
    for (const prefix of prefixes) {
      await app.register(proxy, {
        upstream,
        prefix,
        rewritePrefix: prefix,
        // Undici's idle limits between chunks, not on a whole transfer: a long download runs as long as bytes flow.
        undici: { headersTimeout: upstreamTimeout, bodyTimeout: upstreamTimeout },
        replyOptions: replyOptions as never,
      });
    }
    await app.register(proxy, {
      upstream,
      prefix: `/health/${service}`,
      rewritePrefix: '/health',
      preHandler: operatorsOnly,
      replyOptions: replyOptions as never,
    });
  }
  // Every request to a port host, to billing as it came (port-hosts.ts).
  const billingSocket = opts.socketDir ? path.join(opts.socketDir, `${PORT_HOST_SERVICE}.sock`) : undefined;
  await forwardPortHosts(app, {
    target: billingSocket ? { socketPath: billingSocket } : { url: opts.upstreams[PORT_HOST_SERVICE] },
    timeout: upstreamTimeout,
    problem,
  });
  // WebSocket upgrades on the same routes and on port hosts, with the same headers (upgrade.ts).
  proxyUpgrades(app, {
    upstreamOf: (service) =>
      opts.socketDir ? { socketPath: path.join(opts.socketDir, `${service}.sock`) } : { url: opts.upstreams[service] },
    requestId,
    metrics,
    answerTimeout: upstreamTimeout,
    idleTimeout: opts.timeouts?.upgradeIdle ?? UPGRADE_IDLE_TIMEOUT_MS,
  });
  app.setNotFoundHandler((request, reply) =>
    problem(
      reply,
      request,
      404,
      'ROUTE_NOT_FOUND',
      `no service answers ${request.method} ${pathOf(request)} behind the gateway`,
    ),
  );
  return app;
}
