/**
 * The platform's one origin for `pnpm start`: a thin reverse proxy built on @fastify/http-proxy (undici underneath),
 * no code of its own between caller and service but the route table and the request ID.
 *
 * - Every public path goes to its service unchanged (`ROUTES`); any other path is a 404 problem. `/health` is the
 *   gateway's own; `/health/<service>` is that service's `/health` (for operators).
 * - Bodies stream both ways (an upload of any size is never read into memory, nor a download); every header passes
 *   as it is, `Authorization`, `Range`, `ETag` and `If-None-Match` and a 307's `Location` included; the services
 *   answer for themselves (auth, validation, problems).
 * - `X-Request-ID`: the caller's when it is sane (1-128 of `A-Za-z0-9._:-`), else a new UUID, sent on to the service
 *   and back to the caller, and in the gateway's log line. `X-Forwarded-For`/`-Proto`/`-Host` are set.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import proxy from '@fastify/http-proxy';
import Fastify, { type FastifyInstance } from 'fastify';

/** The services behind the gateway. */
type Service = 'auth' | 'storage' | 'provider-registry' | 'billing';

/** Which service answers which path prefixes (each prefix and everything under it). */
const ROUTES: Record<Service, readonly string[]> = {
  auth: ['/api/v1/auth', '/.well-known/jwks.json'],
  storage: ['/objects', '/buckets', '/presigned-url'],
  'provider-registry': ['/providers', '/offers', '/prices'],
  billing: ['/api/v1/billing', '/api/v1/wallet', '/api/v1/pricing', '/api/v1/provider', '/api/v1/deposits'],
};

export interface GatewayOptions {
  /** Each service's base URL (`http://127.0.0.1:8000`). */
  upstreams: Record<Service, string>;
  /** Pino level for the gateway's own log lines (one per request at `info`). */
  logLevel?: string;
}

const SANE_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** The request's ID: the caller's when sane, else a new one. */
function requestId(req: IncomingMessage): string {
  const given = req.headers['x-request-id'];
  return typeof given === 'string' && SANE_ID.test(given) ? given : randomUUID();
}

/** The gateway's Fastify app (not listening). */
export async function buildGateway(opts: GatewayOptions): Promise<FastifyInstance> {
  const app = Fastify({
    logger: { level: opts.logLevel ?? 'info', base: { service: 'gateway' } },
    genReqId: requestId,
    // Long downloads and uploads: no time limit of the gateway's own (the services keep theirs).
    requestTimeout: 0,
    return503OnClosing: true,
  });
  app.addHook('onRequest', async (request, reply) => {
    request.headers['x-request-id'] = request.id;
    reply.header('x-request-id', request.id);
  });
  app.get('/health', async () => ({ status: 'UP', service: 'gateway' }));
  for (const [service, prefixes] of Object.entries(ROUTES) as [Service, readonly string[]][]) {
    const upstream = opts.upstreams[service];
    for (const prefix of prefixes) {
      await app.register(proxy, {
        upstream,
        prefix,
        rewritePrefix: prefix,
        // Undici's idle limits between chunks, not on a whole transfer: a long download runs as long as bytes flow.
        undici: { headersTimeout: 300_000, bodyTimeout: 300_000 },
      });
    }
    await app.register(proxy, { upstream, prefix: `/health/${service}`, rewritePrefix: '/health' });
  }
  app.setNotFoundHandler((request, reply) => {
    void reply
      .code(404)
      .type('application/problem+json')
      .send({
        type: 'about:blank',
        title: 'Not Found',
        status: 404,
        code: 'ROUTE_NOT_FOUND',
        detail: `no service answers ${request.method} ${request.url.split('?')[0]} behind the gateway`,
        instance: request.url.split('?')[0],
        request_id: request.id,
      });
  });
  return app;
}
