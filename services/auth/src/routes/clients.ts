/** /api/v1/auth/clients: machine clients, for admins (every client) and providers (their own daemons). */
import {
  type App,
  CLIENT_ROLES,
  callerOf,
  durationMs,
  durationWithin,
  PAGE_HEADERS,
  pageQuery,
  type RouteDocs,
  setNextPage,
  zBool,
  zDuration,
} from '@gpu/common';
import { z } from 'zod';
import { type Client, createClient, getClient, listClients, revokeClient, rotateClient } from '../domain/clients.ts';
import type { AuthContext } from '../domain/context.ts';
import { forRequest } from './request.ts';
import { problems, schemas } from './schemas.ts';

const clientSchema = z
  .object({
    id: z.uuid().describe('the client ID (`client_id` at the token endpoint)'),
    name: z.string(),
    role: z.enum(CLIENT_ROLES),
    owner_id: z.uuid().nullable().describe("a daemon's provider owner; null for other roles"),
    created_by: z.uuid().nullable(),
    created_at: z.string(),
    rotated_at: z.string().nullable(),
    revoked_at: z.string().nullable(),
    last_used_at: z.string().nullable(),
    previous_secret_expires_at: z.string().nullable().describe('until when the secret before the last rotation works'),
  })
  .describe('A machine client (never its secret)')
  .register(schemas, { id: 'Client' });

/** A page of clients, oldest first. */
const clientListSchema = z
  .array(clientSchema)
  .describe('Clients, oldest first; `X-Next-Cursor` names the next page')
  .register(schemas, { id: 'ClientList' });

/**
 * A client with its new secret. `client_id` and `client_secret` at the top level make the answer, saved as it is, the
 * provider daemon's credentials file (`credentials.file`), as are the files start-up writes for platform clients.
 */
const withSecretSchema = z
  .object({
    client_id: z.uuid().describe('the client ID (`client_id` at the token endpoint); the same as `client.id`'),
    client_secret: z.string().describe('shown only in this answer; store it now'),
    client: clientSchema,
  })
  .describe("a client and its secret: saved as it is, the provider daemon's credentials file")
  .register(schemas, { id: 'ClientWithSecret' });

/** The answer of a creation or rotation: the client and its secret, usable as a credentials file. */
const withSecret = (client: Client, secret: string) => ({
  client_id: client.id,
  client_secret: secret,
  client: clientJson(client),
});

const iso = (d: Date | string | null) => (d === null ? null : new Date(d).toISOString());

/** The wire view of a client (never its secret hashes). */
function clientJson(c: Client) {
  return {
    id: c.id,
    name: c.name,
    role: c.role,
    owner_id: c.owner_id,
    created_by: c.created_by,
    created_at: iso(c.created_at)!,
    rotated_at: iso(c.rotated_at),
    revoked_at: iso(c.revoked_at),
    last_used_at: iso(c.last_used_at),
    previous_secret_expires_at: iso(c.previous_secret_expires_at),
  };
}

/** No NUL or control characters in a name that logs and files carry. */
const nameSchema = z
  .string()
  .min(1)
  .max(100)
  .regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, 'letters, digits, ".", "_" and "-", starting with a letter or digit');

const createBodySchema = z
  .object({ name: nameSchema, role: z.enum(CLIENT_ROLES), owner_id: z.uuid().optional() })
  .register(schemas, { id: 'CreateClientRequest' });

/** The longest a previous secret may keep working after a rotation: a week covers any roll-out. */
const MAX_ROTATION_GRACE = '7d';

const rotateBodySchema = z
  .object({
    grace_period: durationWithin(
      zDuration(),
      '0s',
      MAX_ROTATION_GRACE,
      `must be from 0s to ${MAX_ROTATION_GRACE}`,
    ).optional(),
  })
  .nullish()
  .describe('optional: without a body the configured rotation grace applies')
  .register(schemas, { id: 'RotateClientSecretRequest' });

/** The answers with a secret, which no cache may keep. */
const SECRET_DOCS = { headers: { 200: ['Cache-Control'], 201: ['Cache-Control'] } } satisfies RouteDocs;

const idParams = z.object({ id: z.uuid() });
const tags = ['clients'];
const access = { roles: ['admin', 'provider'] as const };

export async function clientRoutes(app: App, ctx: AuthContext): Promise<void> {
  app.post(
    '/clients',
    {
      config: { ...access, openapi: SECRET_DOCS },
      schema: {
        tags,
        operationId: 'createClient',
        summary: 'Create a machine client; its secret is in this answer only',
        description:
          'Admins create any client: `service`, `gateway`, `scheduler`, or `daemon` with the provider owner it acts ' +
          'for. A provider creates daemon clients that act for themselves (owner_id may be left out). ' +
          "The name is unique among the owner's active clients (a platform client's among the platform's): " +
          "409 CLIENT_NAME_TAKEN for the same owner's duplicate only; another provider's names never collide. " +
          'The answer carries `client_id` and `client_secret` at the top level: saved as it is ' +
          "(`curl ... > credentials.json`) it is the provider daemon's credentials file.",
        body: createBodySchema,
        response: { 201: withSecretSchema, ...problems(400, 404, 409, 503) },
      },
    },
    async (request, reply) => {
      const { client, secret } = await createClient(forRequest(ctx, request), callerOf(request), request.body);
      reply.header('cache-control', 'no-store');
      return reply.code(201).send(withSecret(client, secret));
    },
  );

  app.get(
    '/clients',
    {
      config: { ...access, openapi: { headers: { 200: PAGE_HEADERS } } },
      schema: {
        tags,
        operationId: 'listClients',
        summary: 'List clients (admins: all; providers: their daemons), oldest first',
        querystring: z.object({
          ...pageQuery,
          include_revoked: zBool().default(false).describe('true lists revoked clients too'),
        }),
        response: { 200: clientListSchema, ...problems(400, 503) },
      },
    },
    async (request, reply) => {
      const page = await listClients(ctx, callerOf(request), request.query);
      setNextPage(request, reply, page.nextCursor);
      return page.clients.map(clientJson);
    },
  );

  app.get(
    '/clients/:id',
    {
      config: access,
      schema: {
        tags,
        operationId: 'getClient',
        summary: 'One client',
        params: idParams,
        response: { 200: clientSchema, ...problems(400, 404, 503) },
      },
    },
    async (request) => clientJson(await getClient(ctx, callerOf(request), request.params.id)),
  );

  app.post(
    '/clients/:id/rotate',
    {
      config: { ...access, openapi: SECRET_DOCS },
      schema: {
        tags,
        operationId: 'rotateClientSecret',
        summary: 'Give a client a new secret; the old one keeps working for a grace period',
        description:
          '`grace_period` (a duration such as "30m"; the configured rotation grace by default) is how long the ' +
          'previous secret stays valid, at most 7 days; "0s" ends it at once (a leaked secret).',
        params: idParams,
        body: rotateBodySchema,
        response: { 200: withSecretSchema, ...problems(400, 404, 409, 503) },
      },
    },
    async (request, reply) => {
      const grace = request.body?.grace_period;
      const graceMs = grace === undefined ? undefined : durationMs(grace);
      const { client, secret } = await rotateClient(
        forRequest(ctx, request),
        callerOf(request),
        request.params.id,
        graceMs,
      );
      reply.header('cache-control', 'no-store');
      return withSecret(client, secret);
    },
  );

  app.delete(
    '/clients/:id',
    {
      config: access,
      schema: {
        tags,
        operationId: 'revokeClient',
        summary: 'Revoke a client: no new tokens; tokens already issued expire within the access-token lifetime',
        params: idParams,
        response: { 200: clientSchema, ...problems(400, 404, 503) },
      },
    },
    async (request) => clientJson(await revokeClient(forRequest(ctx, request), callerOf(request), request.params.id)),
  );
}
