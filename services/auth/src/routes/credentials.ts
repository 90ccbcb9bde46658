/**
 * /api/v1/auth/credentials/live: whether the credentials behind tokens other services verified by signature are still
 * live, many at once, for the platform's services (billing ends the streams it relays whose credential ended) and
 * admins.
 */
import { type App, callerOf } from '@gpu/common';
import { z } from 'zod';
import {
  CREDENTIAL_ENDS,
  type CredentialRef,
  credentialsLive,
  MAX_CREDENTIALS_PER_CHECK,
} from '../domain/accounts/index.ts';
import type { AuthContext } from '../domain/context.ts';
import { problems, schemas } from './schemas.ts';

const credentialSchema = z
  .object({
    user_id: z.uuid().describe("the token's `sub`"),
    key_id: z.uuid().optional().describe("an API key's token: its `key_id`"),
    sign_in_id: z.uuid().optional().describe("a user's sign-in token: its `sid`"),
  })
  .describe('The credential an access token names: its user, and its API key or its sign-in (not both)')
  .register(schemas, { id: 'Credential' });

const bodySchema = z
  .object({
    credentials: z
      .array(credentialSchema)
      .min(1)
      .max(MAX_CREDENTIALS_PER_CHECK)
      .superRefine((credentials, check) => {
        credentials.forEach((c, i) => {
          if (c.key_id !== undefined && c.sign_in_id !== undefined) {
            check.addIssue({
              code: 'custom',
              path: [i, 'sign_in_id'],
              message: 'a token names an API key or a sign-in, never both',
            });
          }
        });
      }),
  })
  .register(schemas, { id: 'CredentialsLiveRequest' });

const responseSchema = z
  .object({
    live: z.array(z.boolean()).describe('one for each credential asked about, in the same order'),
    reasons: z
      .array(z.enum(CREDENTIAL_ENDS).nullable())
      .describe(
        'why each credential is not live, in the same order (null for a live one): `revoked` (the API key revoked, ' +
          "or ended with its account's epoch), `unknown_key` (no such key of that user), `signed_out` (the sign-in " +
          'ended: signed out, the password changed, the account started afresh; or no such sign-in of that user), ' +
          '`user_gone` (no such user)',
      ),
  })
  .register(schemas, { id: 'CredentialsLive' });

const credentialOf = (c: z.infer<typeof credentialSchema>): CredentialRef => ({
  userId: c.user_id,
  ...(c.key_id === undefined ? {} : { keyId: c.key_id }),
  ...(c.sign_in_id === undefined ? {} : { signInId: c.sign_in_id }),
});

export async function credentialRoutes(app: App, ctx: AuthContext): Promise<void> {
  app.post(
    '/credentials/live',
    {
      config: { roles: ['service', 'admin'] },
      schema: {
        tags: ['credentials'],
        operationId: 'checkCredentialsLive',
        summary: 'Which credentials behind access tokens are still live (platform services and admins)',
        description:
          "For the platform's services, which verify tokens by their signature alone (a machine client of role " +
          '`service`), and admins; anyone else 403 ROLE_REQUIRED. The rule is the one this service applies to its ' +
          "own routes' tokens: an API key's credential is live while the key exists, is that user's, is not revoked " +
          "and belongs to the account's current epoch; a sign-in's while it is not signed out (nor ended by a " +
          "password change or a fresh start); a user's token that names neither while the user exists. " +
          `1 to ${MAX_CREDENTIALS_PER_CHECK} credentials a request, answered in one query; a read: not in the ` +
          'audit trail.',
        body: bodySchema,
        response: { 200: responseSchema, ...problems(400, 401, 403) },
      },
    },
    async (request) => {
      const ends = await credentialsLive(ctx, callerOf(request), request.body.credentials.map(credentialOf));
      return { live: ends.map((end) => end === null), reasons: ends };
    },
  );
}
