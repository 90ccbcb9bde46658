/**
 * buildApp(ctx): the auth service's HTTP wiring. Never listens; tests inject
 * or listen on port 0 themselves.
 */
import { type App, createApp, createTokenVerifier } from '@gpu/common';
import { sql } from 'kysely';
import { withLiveCredentials } from './domain/accounts/index.ts';
import type { AuthContext } from './domain/context.ts';
import { auditRoutes } from './routes/audit.ts';
import { authRoutes } from './routes/auth.ts';
import { clientRoutes } from './routes/clients.ts';
import { credentialRoutes } from './routes/credentials.ts';
import { jwksRoutes } from './routes/jwks.ts';
import { keyRoutes } from './routes/keys.ts';
import { natsUserRoutes } from './routes/nats-users.ts';
import { recoveryRoutes } from './routes/recovery.ts';
import { schemas } from './routes/schemas.ts';
import { signInRoutes } from './routes/sign-ins.ts';
import { sshKeyRoutes } from './routes/ssh-keys.ts';
import { tokenRoutes } from './routes/token.ts';
import { userRoutes } from './routes/users.ts';

export const SERVICE_NAME = 'auth-service';
const API_PREFIX = '/api/v1/auth';

export async function buildApp(ctx: AuthContext): Promise<App> {
  const { jwt } = ctx.config;
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
    readinessChecks: ['database'],
    // The auth service verifies its own tokens with its own keys (no JWKS round trip to itself), and refuses at once
    // those of a sign-in or API key it sees withdrawn (domain/accounts/liveness.ts).
    verifier: withLiveCredentials(
      ctx,
      createTokenVerifier({ issuer: jwt.issuer, audience: jwt.audience, ...ctx.keys.verifierKey() }),
    ),
    schemas,
  });
  await app.register(jwksRoutes, ctx);
  await app.register(
    async (api) => {
      await authRoutes(api as App, ctx);
      await userRoutes(api as App, ctx);
      await clientRoutes(api as App, ctx);
      await keyRoutes(api as App, ctx);
      await signInRoutes(api as App, ctx);
      await sshKeyRoutes(api as App, ctx);
      await natsUserRoutes(api as App, ctx);
      await credentialRoutes(api as App, ctx);
      await recoveryRoutes(api as App, ctx);
      await auditRoutes(api as App, ctx);
      // In a plugin of its own: the token endpoint's form-body parser reaches no other route (they take JSON only).
      await api.register(async (token) => tokenRoutes(token as App, ctx));
    },
    { prefix: API_PREFIX },
  );
  return app;
}
