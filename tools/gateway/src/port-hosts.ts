/**
 * Port hosts through the Node gateway (routes.ts, `PORT_HOST`): every ordinary request to
 * `<session-uuid>-<port>.ports.<domain>` goes to billing as it came, whatever its method and path. (Its WebSocket
 * upgrades go there from upgrade.ts.)
 *
 * - The gateway routes such a request here before its route table is consulted (`portHostUrl`, Fastify's
 *   `rewriteUrl`): none of the table's prefixes, nor the gateway's own `/health` and `/metrics`, applies on a port
 *   host, whose paths are the workload's. A name under `ports.` that is no port host (`foo.ports.localhost`) is routed
 *   nowhere: the gateway's 404 problem, whatever the path.
 * - The path and query go on exactly as sent (not normalised, not decoded: `/a%2Fb/../c?q=1` arrives so), which
 *   @fastify/reply-from cannot do (it resolves the path against the service's URL), hence a request of node:http's
 *   own here; the Host the caller wrote goes on too (billing finds the session and port by it), with the headers any
 *   request gets (forwarding.ts: `X-Forwarded-*`, the request and correlation IDs).
 * - Bodies stream both ways, up to the upload limit (`bodyLimitOf`: a larger declared body is the gateway's 413, as
 *   anywhere); the service's answer passes as it is, its hop-by-hop headers aside. The same timeouts as any request:
 *   `timeout` for the answer's headers and between two chunks; a service not reached is a 502 problem, one too slow a
 *   504.
 * - Tracing on, its call to billing is a client span under the request's server span, whose context billing gets.
 */
import { Agent, request as httpRequest, type IncomingHttpHeaders, type IncomingMessage } from 'node:http';
import { tracingOn } from '@gpu/common/tracing';
import { context, propagation, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { callerOf, endToEnd, forwardedHeaders } from './forwarding.ts';
import { hostKindOf, PORT_HOST, PORT_HOST_SERVICE } from './routes.ts';

/** Where the gateway routes a port host's requests (a path no caller reaches on any other host: see `portHostUrl`). */
const PORT_HOST_PATH = '/.gateway/port-host';
/** Where it routes a name under `ports.` that is no port host: no route, so the gateway's 404. */
const NOT_A_PORT_HOST_PATH = '/.gateway/not-a-port-host';

/**
 * The URL the gateway routes a request by (Fastify's `rewriteUrl`): a port host's and a would-be port host's to paths
 * of their own, any other request's as it came. The request keeps its own URL (`request.originalUrl`).
 */
export function portHostUrl(req: { url?: string; headers: IncomingHttpHeaders }): string {
  const kind = hostKindOf(req.headers.host);
  if (kind === 'port-host') return PORT_HOST_PATH;
  if (kind === 'not-a-port-host') return NOT_A_PORT_HOST_PATH;
  return req.url ?? '/';
}

export interface PortHostSettings {
  /** Where billing is reached: its base URL, or its gateway socket. */
  target: { url: string } | { socketPath: string };
  /** How long billing may take to answer, and to send the next chunk of a body either way, in ms. */
  timeout: number;
  /** The gateway's problem answer (its status, code and detail). */
  problem: (reply: FastifyReply, request: FastifyRequest, status: number, code: string, detail: string) => unknown;
}

/** A client span for the call to billing, under the request's server span (tracing on), and its context's headers. */
function clientSpan(request: FastifyRequest) {
  if (!tracingOn()) return undefined;
  const parent = request.traceSpan?.context ?? context.active();
  const span = trace
    .getTracer('gateway')
    .startSpan(
      request.method,
      { kind: SpanKind.CLIENT, attributes: { 'http.request.method': request.method } },
      parent,
    );
  const carrier: Record<string, string> = {};
  propagation.inject(trace.setSpan(parent, span), carrier);
  return {
    carrier,
    end(status: number) {
      span.setAttribute('http.response.status_code', status);
      if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
      span.end();
    },
  };
}

/** Registers the port hosts' route on `app` (see the top of this file). */
export async function forwardPortHosts(app: FastifyInstance, settings: PortHostSettings): Promise<void> {
  const agent = new Agent({ keepAlive: true });
  app.addHook('onClose', (_app, done) => {
    agent.destroy();
    done();
  });
  const url = 'url' in settings.target ? new URL(settings.target.url) : undefined;
  const where = url
    ? { hostname: url.hostname.replace(/^\[|\]$/g, ''), port: url.port || 80 }
    : { socketPath: (settings.target as { socketPath: string }).socketPath };

  const forward = (request: FastifyRequest, reply: FastifyReply) =>
    new Promise<void>((resolve) => {
      const span = clientSpan(request);
      const headers = {
        // The Host the caller wrote goes on whatever its Connection names: billing finds the session and port by it.
        ...forwardedHeaders(callerOf(request), request.headers, request.headers.host),
        ...span?.carrier,
        // A chunked body goes on chunked, whatever the method (node:http would frame only some methods' by itself).
        ...(request.headers['transfer-encoding'] ? { 'transfer-encoding': 'chunked' } : {}),
      };
      let answered = false;
      const fail = (status: number, code: string, detail: string) => {
        if (answered) return;
        answered = true;
        span?.end(status);
        request.log.warn({ service: PORT_HOST_SERVICE, status }, 'service not reached');
        resolve(settings.problem(reply, request, status, code, detail) as never);
      };
      const outgoing = httpRequest({
        ...where,
        agent,
        method: request.method,
        path: request.originalUrl,
        headers: headers as Record<string, string>,
        timeout: settings.timeout,
      });
      outgoing.on('response', (res: IncomingMessage) => {
        if (answered) return res.resume();
        answered = true;
        span?.end(res.statusCode ?? 502);
        // The gateway's own request and correlation IDs, already on the reply.
        reply
          .code(res.statusCode ?? 502)
          .headers(endToEnd(res.headers, ['x-request-id', 'x-correlation-id']) as IncomingHttpHeaders);
        resolve(reply.send(res) as never);
      });
      // No byte either way for `timeout`: before the answer a 504, during it the answer cut off.
      outgoing.on('timeout', () => {
        if (answered) outgoing.destroy(new Error('billing sent nothing in time'));
        else {
          fail(504, 'UPSTREAM_TIMEOUT', `${PORT_HOST_SERVICE} did not answer in time`);
          outgoing.destroy();
        }
      });
      outgoing.on('error', () => fail(502, 'BAD_GATEWAY', `${PORT_HOST_SERVICE} did not answer`));
      // A caller gone before the answer is whole: the call to billing goes too.
      reply.raw.once('close', () => {
        if (!reply.raw.writableFinished) outgoing.destroy();
      });
      request.raw.pipe(outgoing);
    });

  await app.register(async (scope) => {
    // The body is billing's to read, as it arrives: no parser of the gateway's reads it.
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', (_request, _payload, done) => done(null));
    scope.all(PORT_HOST_PATH, { constraints: { host: PORT_HOST } }, forward);
  });
}
