/**
 * POST /api/v1/auth/token: the OAuth 2.0 token endpoint, client-credentials
 * grant (RFC 6749 §4.4). The request is form-encoded as the RFC says (JSON is
 * accepted too); the client authenticates with HTTP Basic (§2.3.1) or with
 * `client_id` and `client_secret` in the body, not both. Errors are problem
 * bodies that also carry the RFC's `error` member (`invalid_client`,
 * `invalid_request`, `unsupported_grant_type`).
 */
import { type App, ignoringUnknownFields } from '@gpu/common';
import { z } from 'zod';
import { grantApiKeyToken } from '../domain/api-keys.ts';
import { grantClientToken } from '../domain/clients.ts';
import type { AuthContext } from '../domain/context.ts';
import { authErrors } from '../errors.ts';
import { forRequest } from './request.ts';
import { problems, schemas } from './schemas.ts';

// RFC 6749 §3.2: "The authorization server MUST ignore unrecognized request parameters".
const tokenBodySchema = ignoringUnknownFields(
  z.object({
    // The grants the endpoint takes, an `enum` in the document; another is RFC 6749's `unsupported_grant_type`.
    grant_type: z
      .string()
      .max(100)
      .meta({ enum: ['client_credentials', 'api_key'] })
      .describe('client_credentials, or api_key'),
    client_id: z.string().max(100).optional(),
    client_secret: z.string().max(200).optional(),
    api_key: z.string().max(200).optional().describe("with grant_type=api_key: a user's API key (`gpk_...`)"),
    scope: z.string().max(1000).optional().describe('ignored: a client gets its role'),
  }),
).register(schemas, { id: 'TokenRequest' });

const tokenResponseSchema = z
  .object({
    access_token: z
      .string()
      .describe(
        'JWT with iss, sub and client_id (the client), aud, exp, iat, jti, roles [role], and owner_id for a daemon',
      ),
    token_type: z.literal('bearer'),
    expires_in: z.number().int().describe('seconds until the token expires; ask for a new one before then'),
  })
  .register(schemas, { id: 'TokenResponse' });

/** The client's ID and secret from `Authorization: Basic` (RFC 6749 §2.3.1: each form-urlencoded), if present. */
function basicCredentials(header: string | undefined): { clientId: string; secret: string } | undefined {
  const match = header === undefined ? null : /^Basic[ \t]+([A-Za-z0-9+/=]+)[ \t]*$/i.exec(header);
  if (!match) return undefined;
  const decoded = Buffer.from(match[1]!, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  if (colon < 0) throw authErrors.invalidClient();
  try {
    return {
      clientId: decodeURIComponent(decoded.slice(0, colon).replaceAll('+', ' ')),
      secret: decodeURIComponent(decoded.slice(colon + 1).replaceAll('+', ' ')),
    };
  } catch {
    throw authErrors.invalidClient();
  }
}

/**
 * The token endpoint. Register it in a plugin of its own: its form-body parser applies to the plugin's routes only, so
 * every other route of the service answers a form body with 415.
 */
export async function tokenRoutes(app: App, ctx: AuthContext): Promise<void> {
  // RFC 6749 §4.4.2: the request is application/x-www-form-urlencoded.
  app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string' }, (_request, body, done) => {
    done(null, Object.fromEntries(new URLSearchParams(body as string)));
  });

  app.post(
    '/token',
    {
      // RFC 6749 §5.1: the token is not to be cached.
      config: { public: true, openapi: { headers: { 200: ['Cache-Control', 'Pragma'] } } },
      schema: {
        tags: ['clients'],
        operationId: 'issueToken',
        summary: "A machine client, or a user's API key, exchanged for an access token",
        description:
          'Form-encoded (or JSON) `grant_type=client_credentials`; the client authenticates with HTTP Basic or with ' +
          '`client_id` and `client_secret` in the body. Or `grant_type=api_key` with `api_key`: a token of ' +
          "`api_keys.token_ttl` (2 minutes) with the key's scopes (`scope`, `key_id`) and its user's roles but admin. " +
          'No refresh token: ask again before `expires_in` runs out. ' +
          'Wrong, unknown, expired or revoked client credentials, and a wrong or unknown API key, all answer 401 ' +
          '`invalid_client` (INVALID_CLIENT); repeated failures 429. An API key sent whole and right but revoked or ' +
          'expired is told so: 401 API_KEY_REVOKED or API_KEY_EXPIRED (`invalid_client` too); so is a key whose user ' +
          'holds only admin, which keys never carry: 401 API_KEY_NO_ROLE.',
        consumes: ['application/x-www-form-urlencoded', 'application/json'],
        body: tokenBodySchema,
        response: { 200: tokenResponseSchema, ...problems(400, 401, 429, 503) },
      },
    },
    async (request, reply) => {
      const { body } = request;
      const basic = basicCredentials(request.headers.authorization);
      if (basic && (body.client_id !== undefined || body.client_secret !== undefined)) {
        throw authErrors.invalidTokenRequest('authenticate with HTTP Basic or with client_id/client_secret, not both');
      }
      // A user's API key for an access token of its scopes (domain/api-keys.ts).
      if (body.grant_type === 'api_key') {
        if (basic || body.client_id !== undefined || body.api_key === undefined) {
          throw authErrors.invalidTokenRequest('grant_type=api_key takes api_key alone');
        }
        const { token, expiresIn } = await grantApiKeyToken(forRequest(ctx, request), body.api_key, request.clientIp);
        reply.header('cache-control', 'no-store').header('pragma', 'no-cache');
        return { access_token: token, token_type: 'bearer' as const, expires_in: expiresIn };
      }
      if (body.grant_type !== 'client_credentials') throw authErrors.unsupportedGrant(body.grant_type);
      const credentials =
        basic ??
        (body.client_id !== undefined && body.client_secret !== undefined
          ? { clientId: body.client_id, secret: body.client_secret }
          : undefined);
      if (!credentials) throw authErrors.invalidClient();
      const { token, expiresIn } = await grantClientToken(forRequest(ctx, request), credentials, request.clientIp);
      // RFC 6749 §5.1.
      reply.header('cache-control', 'no-store').header('pragma', 'no-cache');
      return { access_token: token, token_type: 'bearer' as const, expires_in: expiresIn };
    },
  );
}
