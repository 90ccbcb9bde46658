/**
 * OpenAPI from the route schemas, Swagger UI at /docs and ReDoc at /redoc,
 * both served from local packages (the machines are offline: no CDN).
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { jsonSchemaTransform } from 'fastify-type-provider-zod';

export interface DocsOptions {
  title: string;
  description: string;
  version: string;
  /** Serve /docs and /redoc (the OpenAPI document is always built). */
  serveUi: boolean;
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
    await app.register(swagger, {
      openapi: {
        openapi: '3.0.3',
        info: { title: opts.title, description: opts.description, version: opts.version },
        components: {
          securitySchemes: { bearerAuth: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' } },
        },
      },
      transform: jsonSchemaTransform,
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
