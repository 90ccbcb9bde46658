/**
 * /api/v1/auth/nats-users: a provider daemon's NATS user, for a NATS server in operator mode
 * (domain/nats-users/). Only a daemon's machine client asks, for a key of its own.
 */
import type { App } from '@gpu/common';
import { callerOf } from '@gpu/common';
import { z } from 'zod';
import type { AuthContext } from '../domain/context.ts';
import { issueDaemonNatsUser } from '../domain/nats-users/index.ts';
import { forRequest } from './request.ts';
import { problems, schemas } from './schemas.ts';

const natsUserSchema = z
  .object({
    jwt: z.string().describe("the user's JWT, signed by the platform account's signing key"),
    owner_id: z.uuid().describe('the owner the daemon client acts for: the second token of its subjects'),
    client_id: z.uuid().describe('the daemon client: the third token of its subjects, and its inbox prefix'),
    expires_at: z.string().describe('RFC 3339, UTC: when the server stops admitting it (ask for the next one before)'),
    publish: z.array(z.string()).describe('the subjects it may publish on (the server refuses any other)'),
    subscribe: z
      .array(z.string())
      .describe("the subjects it may subscribe to: its own inbox prefix, billing's nudges to its owner's machines"),
  })
  .describe("A provider daemon's NATS user")
  .register(schemas, { id: 'NatsUser' });

const requestSchema = z
  .object({
    public_key: z
      .string()
      .min(1)
      .max(64)
      .describe('the public key of an nkey user pair the daemon made (`U...`); its seed stays with the daemon'),
  })
  .register(schemas, { id: 'NatsUserRequest' });

export async function natsUserRoutes(app: App, ctx: AuthContext): Promise<void> {
  app.post(
    '/nats-users',
    {
      // Admins pass the gate to the domain's own check, which refuses them after validation (403 ROLE_REQUIRED): only a
      // daemon's machine client is issued a user.
      config: { roles: ['daemon', 'admin'] },
      schema: {
        tags: ['NATS users'],
        operationId: 'issueNatsUser',
        summary: "A NATS user for a provider daemon's key",
        description:
          "A provider daemon's machine client only (403 otherwise). The user may publish heartbeats and usage reports " +
          'on subjects that name its owner and its client (`<heartbeats>.<owner>.<client>.<provider ID>`, ' +
          '`<usage reports>.<owner>.<client>.<provider ID>`, requests the registry and billing answer), take the answers to its requests (`_INBOX.<client>.>`) and ' +
          "hear billing's nudges to its owner's machines (`<nudges>.<owner>.<provider ID>`), for `nats.user_ttl`. " +
          '400 when `public_key` is not an nkey user key; 401 CLIENT_REVOKED for a client revoked (or whose owner is ' +
          'no longer a provider); 404 NATS_USERS_DISABLED when this platform issues none.',
        body: requestSchema,
        response: { 201: natsUserSchema, ...problems(400, 401, 403, 404) },
      },
    },
    async (request, reply) => {
      const user = await issueDaemonNatsUser(forRequest(ctx, request), callerOf(request), request.body.public_key);
      reply.code(201);
      return { ...user, expires_at: user.expires_at.toISOString() };
    },
  );
}
