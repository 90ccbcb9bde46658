/**
 * buildApp(ctx): the auth service's HTTP wiring. Never listens; tests inject
 * or listen on port 0 themselves.
 */
import { type App, bearerAuth, createApp, createTokenVerifier } from '@gpu/common';
import { sql } from 'kysely';
import type { AuthContext } from './domain/context.ts';
import { authRoutes } from './routes/auth.ts';
import { jwksRoutes } from './routes/jwks.ts';
import { userRoutes } from './routes/users.ts';

export const SERVICE_NAME = 'auth-service';
export const API_PREFIX = '/api/v1/auth';

export async function buildApp(ctx: AuthContext): Promise<App> {
  const app = await createApp({
    service: SERVICE_NAME,
    description:
      'Authentication service of the GPU rental platform: accounts with argon2id password hashes and roles, ' +
      'JWT access tokens, rotating refresh tokens with reuse detection, and the JWKS other services verify with.',
    config: ctx.config,
    logger: ctx.logger,
    healthChecks: {
      database: () => sql`select 1`.execute(ctx.db),
    },
  });
  const { jwt } = ctx.config;
  await app.register(bearerAuth, {
    verifier: createTokenVerifier({ issuer: jwt.issuer, audience: jwt.audience, ...ctx.keys.verifierKey() }),
  });
  await app.register(jwksRoutes, ctx);
  await app.register(
    async (api) => {
      await authRoutes(api as App, ctx);
      await userRoutes(api as App, ctx);
    },
    { prefix: API_PREFIX },
  );
  return app;
}
