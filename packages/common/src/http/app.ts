/**
 * The app factory: every service gets the same HTTP stack. Request ID,
 * correlation ID, real client IP (trusted proxies only), request logging,
 * panic recovery, request timeout, CORS, problem+json errors, metrics,
 * health and OpenAPI docs. `createApp` never listens: tests inject.
 */
import type { IncomingMessage } from 'node:http';
import cors from '@fastify/cors';
import Fastify, {
  type FastifyBaseLogger,
  type FastifyInstance,
  type RawReplyDefaultExpression,
  type RawRequestDefaultExpression,
  type RawServerDefault,
} from 'fastify';
import { serializerCompiler, validatorCompiler, type ZodTypeProvider } from 'fastify-type-provider-zod';
import type { ChildLoggerOptions, Logger } from 'pino';
import { z } from 'zod';
import { accessControl, isPublicRoute } from '../auth/access-control.ts';
import { createTokenVerifier, type TokenVerifier } from '../auth/token-verifier.ts';
import { contractCheckFile } from '../config.ts';
import type { BaseConfig } from '../config-schema.ts';
import { durationMs } from '../duration.ts';
import { GATEWAY_SERVER, internalServer } from '../openapi/document.ts';
import { docsPlugin } from '../openapi/plugin.ts';
import { checkAnswers } from '../openapi/response-check.ts';
import { type SchemaRegistry, schemaRegistry } from '../openapi/route-docs.ts';
import { tracingHooks } from '../telemetry/tracing.ts';
import { installErrorHandling } from './error-handler.ts';
import { onClientError, onFrameworkError } from './framework-errors.ts';
import { type HealthCheck, healthPlugin } from './health.ts';
import { LazyRequestLogger } from './lazy-logger.ts';
import { RequestLogController } from './log-controller.ts';
import { metricsPlugin } from './metrics.ts';
import { refuseNulCharacters } from './nul-characters.ts';
import { JSON_BODY_LIMIT, lingerBeforeClose } from './oversized-body.ts';
import { correlationIdOf, genReqId, requestContext } from './request-context.ts';
import { strictInput } from './strict-input.ts';
import { requestTimeout } from './timeout.ts';

export type App = FastifyInstance<
  RawServerDefault,
  RawRequestDefaultExpression,
  RawReplyDefaultExpression,
  FastifyBaseLogger,
  ZodTypeProvider
>;

/** A route of the app, as recorded when it was added. */
export interface RouteEntry {
  method: string;
  url: string;
  public: boolean;
}

declare module 'fastify' {
  interface FastifyInstance {
    /** Every route of the app but the platform's own (health, metrics, docs) and CORS preflights. */
    routeTable: readonly RouteEntry[];
  }
}

export interface CreateAppOptions {
  /** Service name as in the contract's table (`storage-service`, ...). */
  service: string;
  version?: string;
  description: string;
  config: BaseConfig;
  logger: Logger;
  /** Dependency checks for GET /health. */
  healthChecks?: Record<string, HealthCheck>;
  /**
   * The health checks that decide `/health/ready` (those every request needs: the database); absent: all of them. A
   * dependency left out (NATS) makes `/health` 503 without taking the instance out of a load balancer.
   */
  readinessChecks?: string[];
  /** Largest body the JSON parser accepts (bytes). */
  bodyLimit?: number;
  /** The verifier of access tokens; built from `config.access` when absent (the auth service passes its own keys). */
  verifier?: TokenVerifier;
  /** The service's named schemas: the components of its OpenAPI document, used by `$ref` (none when absent). */
  schemas?: SchemaRegistry;
  /**
   * The path a request is routed by, from the request as it came (billing's workload port hosts: every path there is
   * the workload's); the request keeps what was sent as `originalUrl`.
   */
  rewriteUrl?: (request: IncomingMessage) => string;
}

/** Methods the services answer; @fastify/cors alone would allow only GET, HEAD and POST. */
const CORS_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'];

/** Request headers the contract and the services read. */
const CORS_ALLOWED_HEADERS = [
  'authorization',
  'content-type',
  'x-request-id',
  'x-correlation-id',
  'idempotency-key',
  'range',
  'if-none-match',
  'if-modified-since',
  'if-match',
  // A browser's trace (OpenTelemetry's W3C trace context) goes on into the services.
  'traceparent',
  'tracestate',
];

/** Response headers a browser client needs to read. */
const CORS_EXPOSED_HEADERS = [
  'x-request-id',
  'x-correlation-id',
  'etag',
  'content-length',
  'content-range',
  'accept-ranges',
  'last-modified',
  'location',
  'retry-after',
  'www-authenticate',
  'idempotent-replayed',
  // Paging headers (registry cursors, storage listings), so browsers can follow them too.
  'link',
  'x-next-cursor',
  'x-next-start-after',
];

/** The app's token verifier, or null when access control is switched off. */
function verifierFor(opts: CreateAppOptions): TokenVerifier | null {
  if (!opts.config.access.enabled) return null;
  return opts.verifier ?? accessVerifier(opts.config);
}

/**
 * The token verifier of a service's `access` section (null when access control is switched off), for work outside
 * HTTP that authenticates callers the same way (NATS messages); pass it to `createApp` as `verifier` to share it.
 */
export function accessVerifier(config: Pick<CreateAppOptions['config'], 'access'>): TokenVerifier | null {
  const { access } = config;
  if (!access.enabled) return null;
  return createTokenVerifier({
    issuer: access.issuer,
    audience: access.audience,
    ...(access.secret ? { secret: access.secret } : { jwksUrl: access.jwks_url }),
    jwksCacheMaxAgeMs: durationMs(access.jwks_cache),
  });
}

/** Moves a schema's name in the registry to its replacement (a body's strict copy), so the document names the latter. */
function transferName(registry: SchemaRegistry, from: z.ZodType, to: z.ZodType): void {
  if (from === to) return;
  const meta = registry.get(from);
  if (!meta?.id || registry.has(to)) return;
  registry.remove(from);
  registry.add(to, meta);
}

function trustProxySetting(proxies: string[]): boolean | string[] {
  if (proxies.length === 0) return false;
  if (proxies.includes('*') || proxies.includes('true')) return true;
  return proxies;
}

export async function createApp(opts: CreateAppOptions): Promise<App> {
  const { config } = opts;
  const trustProxy = trustProxySetting(config.server.trusted_proxies);
  const logController = new RequestLogController({ requestIdLogLabel: 'request_id' });
  const app = Fastify({
    loggerInstance: opts.logger,
    genReqId,
    requestIdHeader: false,
    logController,
    trustProxy,
    bodyLimit: opts.bodyLimit ?? JSON_BODY_LIMIT,
    forceCloseConnections: 'idle',
    return503OnClosing: true,
    // A path parameter longer than the router's limit (100 characters by default) matched no route with that
    // parameter: storage's `/objects/{101-character name}/key` became a key in the default bucket. Up to this length a
    // parameter reaches its route, whose schema answers for it (a 400 naming it); a longer one is no route (404).
    routerOptions: { maxParamLength: 2048 },
    // Errors before any route runs get the same problem bodies as the rest.
    frameworkErrors: onFrameworkError,
    clientErrorHandler: onClientError,
    childLoggerFactory(logger, bindings, childOpts, rawReq) {
      const lazy = new LazyRequestLogger(
        logger as Logger,
        { ...bindings, correlation_id: correlationIdOf(rawReq) },
        childOpts as ChildLoggerOptions,
      );
      return lazy as unknown as FastifyBaseLogger;
    },
    ajv: { customOptions: { coerceTypes: true } },
    ...(opts.rewriteUrl ? { rewriteUrl: opts.rewriteUrl } : {}),
  }).withTypeProvider<ZodTypeProvider>();

  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  installErrorHandling(app as unknown as FastifyInstance);

  // A response sent while the app closes closes its connection: a keep-alive connection left
  // idle would hold server.close(), and so a graceful shutdown, until its keep-alive timeout.
  let closing = false;
  app.addHook('preClose', (done) => {
    closing = true;
    done();
  });
  app.addHook('onSend', (request, reply, payload, done) => {
    if (closing) reply.header('connection', 'close');
    // A response that closes its connection before the request's body was read (a 413, a timeout) lets the caller
    // finish sending and read it, rather than resetting the connection under it (oversized-body.ts).
    if (!request.raw.complete && reply.getHeader('connection') === 'close') lingerBeforeClose(request.raw.socket);
    done(null, payload);
  });
  const healthPath = config.server.health_path;
  const publicPaths = (url: string) =>
    url === healthPath ||
    url === `${healthPath}/ready` ||
    url === `${healthPath}/live` ||
    url === '/metrics' ||
    /^\/(docs|redoc)(\/|$)/.test(url);
  const verifier = verifierFor(opts);
  if (!verifier) {
    opts.logger.warn(
      'access control is OFF (access.enabled: false): every request acts as an admin; use this only in an isolated development setup',
    );
  }
  // Every route is recorded (the access-table tests and the document's check read the list).
  const schemas = opts.schemas ?? schemaRegistry();
  const routeTable: RouteEntry[] = [];
  app.decorate('routeTable', routeTable);
  app.addHook('onRoute', (route) => {
    for (const method of [route.method].flat()) {
      if (method !== 'OPTIONS' && !publicPaths(route.url)) {
        routeTable.push({ method, url: route.url, public: isPublicRoute(route, publicPaths) });
      }
    }
    // Unknown body fields are refused at every depth (strict-input.ts): in validation and in the document alike. The
    // strict copy takes over the body's name in the document.
    if (route.schema?.body instanceof z.ZodType) {
      const body = route.schema.body;
      route.schema.body = strictInput(body);
      transferName(schemas, body, route.schema.body as z.ZodType);
    }
  });
  await app.register(requestContext, { trustedProxies: trustProxy });
  // A span per request when tracing is on (before access control: a refused request is traced too).
  await app.register(tracingHooks, { service: opts.service });
  // The request's first log line, once its span exists: it names the trace and span as every later line does.
  app.addHook('onRequest', (request, reply, done) => {
    logController.incomingRequestNow(request, reply);
    done();
  });
  // An upgrade request (a WebSocket) answered with a plain response (refused before its route took the socket over:
  // 401 at access control, a 4xx of its route's checks) leaves a socket no HTTP server closes any more (Node handed it
  // over at 'upgrade'): it is closed once the answer is written, or a caller refused could keep it open for ever.
  app.addHook('onResponse', (request, _reply, done) => {
    const socket = request.raw.socket;
    if (request.raw.headers.upgrade !== undefined && socket && !socket.destroyed) {
      socket.end();
      setTimeout(() => socket.destroy(), 5_000).unref();
    }
    done();
  });
  await app.register(accessControl, {
    verifier,
    publicPaths,
    requireVerifiedEmail: config.access.require_verified_email,
  });
  await app.register(requestTimeout, { timeoutMs: durationMs(config.request_timeout) });
  await app.register(refuseNulCharacters);
  await app.register(cors, {
    origin: config.server.cors_origins.includes('*') ? true : config.server.cors_origins,
    methods: CORS_METHODS,
    allowedHeaders: CORS_ALLOWED_HEADERS,
    exposedHeaders: CORS_EXPOSED_HEADERS,
    // Browsers cap this (Chromium at 2 hours); it saves a preflight per call within the window.
    maxAge: 7200,
  });
  await app.register(metricsPlugin, { service: opts.service, expose: config.server.metrics_enabled });
  await app.register(docsPlugin, {
    title: opts.service,
    description: opts.description,
    version: opts.version ?? '0.1.0',
    serveUi: config.server.docs_enabled,
    schemas,
    isPublic: (route) => isPublicRoute(route, publicPaths),
    servers: [GATEWAY_SERVER],
    internalServer: internalServer(opts.service, config.server.port),
  });
  const checkFile = contractCheckFile();
  if (checkFile) checkAnswers(app as unknown as FastifyInstance, checkFile, opts.service);
  await app.register(healthPlugin, {
    path: config.server.health_path,
    service: opts.service,
    instanceId: config.instance_id,
    version: opts.version ?? '0.1.0',
    checks: opts.healthChecks ?? {},
    ...(opts.readinessChecks ? { ready: opts.readinessChecks } : {}),
  });
  return app as unknown as App;
}
