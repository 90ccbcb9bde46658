/**
 * /api/v1/auth/keys: a user's API keys, managed by the user themselves, signed in (these routes take no API key: a
 * key never makes or sees another). Exchanged at POST /api/v1/auth/token (`grant_type=api_key`).
 */
import {
  type App,
  callerOf,
  PAGE_HEADERS,
  pageQuery,
  type RouteDocs,
  SCOPE_MEANINGS,
  SCOPES,
  setNextPage,
  zBool,
  zTimestamp,
} from '@gpu/common';
import { z } from 'zod';
import { type ApiKey, createApiKey, listOwnApiKeys, revokeApiKey } from '../domain/api-keys.ts';
import type { AuthContext } from '../domain/context.ts';
import { forRequest } from './request.ts';
import { problems, schemas } from './schemas.ts';

const scopeSchema = z
  .enum(SCOPES)
  .describe(`what the key may do: ${SCOPES.map((s) => `\`${s}\` (${SCOPE_MEANINGS[s]})`).join('; ')}`);

const keySchema = z
  .object({
    id: z.uuid(),
    name: z.string(),
    prefix: z.string().describe('the start of the key, to tell keys apart (`gpk_` and 8 characters)'),
    scopes: z.array(scopeSchema),
    expires_at: z.string().nullable(),
    created_at: z.string(),
    last_used_at: z.string().nullable().describe('when it was last exchanged for a token (to the minute)'),
    revoked_at: z.string().nullable(),
  })
  .describe('An API key (never its secret)')
  .register(schemas, { id: 'ApiKey' });

const createBodySchema = z
  .object({
    name: z
      .string()
      .min(1)
      .max(100)
      .regex(
        /^[A-Za-z0-9][A-Za-z0-9 ._-]*$/,
        'letters, digits, spaces, ".", "_" and "-", starting with a letter or digit',
      ),
    scopes: z.array(scopeSchema).min(1).max(SCOPES.length),
    expires_at: zTimestamp().optional().describe('when the key stops working (RFC 3339); never when absent'),
  })
  .strict()
  .register(schemas, { id: 'CreateApiKeyRequest' });

const withSecretSchema = z
  .object({
    api_key: z.string().describe('the key: shown only in this answer; store it now (it starts with `gpk_`)'),
    key: keySchema,
  })
  .register(schemas, { id: 'ApiKeyWithSecret' });

const iso = (d: Date | string | null) => (d === null ? null : new Date(d).toISOString());

const keyJson = (k: ApiKey) => ({
  id: k.id,
  name: k.name,
  prefix: k.prefix,
  scopes: k.scopes,
  expires_at: iso(k.expires_at),
  created_at: iso(k.created_at)!,
  last_used_at: iso(k.last_used_at),
  revoked_at: iso(k.revoked_at),
});

const SECRET_DOCS = { headers: { 201: ['Cache-Control'] } } satisfies RouteDocs;
/** Renters and providers, whose keys act with their roles (an admin's token would hold none of its own). */
const access = { roles: ['renter', 'provider'] as const };
const tags = ['API keys'];
const SIGN_IN = 'The user themselves, signed in: an API key gets 403 INSUFFICIENT_SCOPE here.';

export async function keyRoutes(app: App, ctx: AuthContext): Promise<void> {
  app.post(
    '/keys',
    {
      config: { ...access, verifiedEmail: 'api_keys', openapi: SECRET_DOCS },
      schema: {
        tags,
        operationId: 'createApiKey',
        summary: 'Create an API key for your programs; the key is in this answer only',
        description:
          `${SIGN_IN} The key is exchanged at POST /api/v1/auth/token (grant_type=api_key) for an access token ` +
          'with its scopes and your roles (never admin). 409 API_KEY_NAME_TAKEN for a name you use, ' +
          'TOO_MANY_API_KEYS past `api_keys.max_per_user`.',
        body: createBodySchema,
        response: { 201: withSecretSchema, ...problems(400, 401, 403, 409) },
      },
    },
    async (request, reply) => {
      const b = request.body;
      const { key, secret } = await createApiKey(forRequest(ctx, request), callerOf(request), {
        name: b.name,
        scopes: b.scopes,
        ...(b.expires_at ? { expiresAt: new Date(b.expires_at) } : {}),
      });
      reply.code(201).header('cache-control', 'no-store');
      return { api_key: secret, key: keyJson(key) };
    },
  );

  app.get(
    '/keys',
    {
      config: { ...access, openapi: { headers: { 200: PAGE_HEADERS } } },
      schema: {
        tags,
        operationId: 'listApiKeys',
        summary: 'Your API keys, oldest first (never their secrets)',
        description: `${SIGN_IN} Revoked keys too with include_revoked=true. Paged as every list of the platform.`,
        querystring: z.object({
          ...pageQuery,
          include_revoked: zBool().default(false).describe('true lists revoked keys too'),
        }),
        response: { 200: z.array(keySchema).register(schemas, { id: 'ApiKeyList' }), ...problems(400, 401, 403) },
      },
    },
    async (request, reply) => {
      const page = await listOwnApiKeys(ctx, callerOf(request), request.query);
      setNextPage(request, reply, page.nextCursor);
      return page.keys.map(keyJson);
    },
  );

  app.delete(
    '/keys/:id',
    {
      config: access,
      schema: {
        tags,
        operationId: 'revokeApiKey',
        summary: 'Revoke one of your API keys, at once',
        description:
          `${SIGN_IN} No instance exchanges the key after this (401 API_KEY_REVOKED), and this service refuses its ` +
          'tokens at once (401 API_KEY_REVOKED); at the other services a token already issued for it works until it ' +
          "expires (`api_keys.token_ttl`, 2 minutes). Revoking again changes nothing; another user's key is 404.",
        params: z.object({ id: z.uuid() }),
        response: { 200: keySchema, ...problems(400, 401, 403, 404) },
      },
    },
    async (request) => keyJson(await revokeApiKey(forRequest(ctx, request), callerOf(request), request.params.id)),
  );
}
