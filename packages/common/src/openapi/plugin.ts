/**
 * OpenAPI 3.1 from the route schemas (route-docs.ts turns each route into an operation, document.ts finishes the
 * document), Swagger UI at /docs and ReDoc at /redoc, both served from local packages (the machines are offline: no
 * CDN).
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance, RouteOptions } from 'fastify';
import fp from 'fastify-plugin';
import { createJsonSchemaTransformObject } from 'fastify-type-provider-zod';
import { healthSchema } from '../http/health.ts';
import { problemSchema } from '../http/problem-schema.ts';
import { type DocumentServer, finishDocument } from './document.ts';
import { routeTransform, type SchemaRegistry } from './route-docs.ts';

export interface DocsOptions {
  title: string;
  description: string;
  version: string;
  /** Serve /docs and /redoc (the OpenAPI document is always built). */
  serveUi: boolean;
  /** The service's named schemas (components), with `Problem` added here. */
  schemas: SchemaRegistry;
  /** Whether a route needs no token (`security: []` in the document). */
  isPublic: (route: RouteOptions) => boolean;
  /** The servers the document names. */
  servers: DocumentServer[];
  /** The server of the operations no gateway routes (`config.openapi.internal`). */
  internalServer?: DocumentServer;
}

const require = createRequire(import.meta.url);
let redocBundle: string | undefined;

function redocHtml(title: string): string {
  return `<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>${title} – ReDoc</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body><redoc spec-url="/docs/json"></redoc><script src="/redoc/redoc.standalone.js"></script></body></html>`;
}

export const docsPlugin = fp(
  async (app: FastifyInstance, opts: DocsOptions) => {
    if (!opts.schemas.has(problemSchema)) opts.schemas.add(problemSchema, { id: 'Problem' });
    if (!opts.schemas.has(healthSchema)) opts.schemas.add(healthSchema, { id: 'Health' });
    const components = createJsonSchemaTransformObject({ schemaRegistry: opts.schemas });
    await app.register(swagger, {
      openapi: {
        openapi: '3.1.0',
        info: { title: opts.title, description: opts.description, version: opts.version },
        components: {
          securitySchemes: {
            bearerAuth: {
              type: 'http',
              scheme: 'bearer',
              bearerFormat: 'JWT',
              description:
                'An access token from the auth service (login, refresh or the client-credentials grant): a JWS ' +
                'verified as RFC8725 (JSON Web Token Best Current Practices) asks: the algorithms pinned (never ' +
                "`none`), the key from the auth service's JWKS by `kid` (or the shared secret of a single-process setup), " +
                'and `iss`, `aud`, `exp` and `iat` checked',
            },
          },
        },
      },
      transform: routeTransform({ schemas: opts.schemas, isPublic: opts.isPublic }),
      transformObject: (input) =>
        finishDocument(components(input) as Record<string, unknown>, {
          servers: opts.servers,
          ...(opts.internalServer ? { internalServer: opts.internalServer } : {}),
        }) as never,
    });
    if (!opts.serveUi) return;
    await app.register(swaggerUi, { routePrefix: '/docs' });
    app.get('/redoc', { schema: { hide: true } }, async (_request, reply) =>
      reply.type('text/html').send(redocHtml(opts.title)),
    );
    app.get('/redoc/redoc.standalone.js', { schema: { hide: true } }, async (_request, reply) => {
      redocBundle ??= readFileSync(require.resolve('redoc/bundles/redoc.standalone.js'), 'utf8');
      return reply.type('application/javascript').header('cache-control', 'public, max-age=86400').send(redocBundle);
    });
  },
  { name: 'docs' },
);
