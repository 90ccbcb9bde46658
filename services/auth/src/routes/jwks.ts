/** The public signing keys as a JWKS, for services that verify tokens without the secret. */
import type { App } from '@gpu/common';
import { z } from 'zod';
import type { AuthContext } from '../domain/context.ts';
import { problems, schemas } from './schemas.ts';

const jwksSchema = z
  .object({ keys: z.array(z.record(z.string(), z.unknown())) })
  .describe('RFC 7517 JWK set: the active key and retired keys whose tokens may still be valid; empty with HS256')
  .register(schemas, { id: 'Jwks' });

/** The two paths of the key set, each with its operationId. */
const JWKS_PATHS = [
  { url: '/.well-known/jwks.json', operationId: 'getJwks' },
  { url: '/api/v1/auth/.well-known/jwks.json', operationId: 'getJwksUnderPrefix' },
];

export async function jwksRoutes(app: App, ctx: AuthContext): Promise<void> {
  for (const { url, operationId } of JWKS_PATHS) {
    app.get(
      url,
      {
        config: { public: true, openapi: { headers: { 200: ['Cache-Control'] } } },
        schema: {
          tags: ['keys'],
          operationId,
          summary: 'Public keys that verify access tokens (JWKS)',
          response: { 200: jwksSchema, ...problems(503) },
        },
      },
      async (_request, reply) => {
        reply.header('cache-control', 'public, max-age=300');
        return ctx.keys.jwks();
      },
    );
  }
}
