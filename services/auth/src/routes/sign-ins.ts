/**
 * /api/v1/auth/sign-ins and /api/v1/auth/password: a user's signed-in devices and their password, by the user
 * themselves, signed in (these routes take no API key).
 */
import { type App, callerOf, noBody, PAGE_HEADERS, pageQuery, setNextPage, zBool } from '@gpu/common';
import { z } from 'zod';
import type { AuthContext } from '../domain/context.ts';
import { changePassword, listSignIns, type SignIn, signOut, signOutOthers } from '../domain/sign-ins.ts';
import { forRequest } from './request.ts';
import { problems, schemas } from './schemas.ts';

const signInSchema = z
  .object({
    id: z.uuid().describe("the sign-in (its refresh tokens' family)"),
    current: z.boolean().describe('the sign-in of the token that asks'),
    signed_in_at: z.string(),
    last_used_at: z.string().describe('when it last logged in or refreshed'),
    expires_at: z.string().describe('when its refresh token expires unless used'),
    user_agent: z.string().nullable().describe('the User-Agent of its last refresh (200 characters at most)'),
    ip: z.string().nullable().describe('the address of its last refresh'),
  })
  .describe('A signed-in device')
  .register(schemas, { id: 'SignIn' });

const passwordBody = z
  .object({
    current_password: z.string().min(1).max(1024),
    new_password: z.string().min(1).max(1024).describe('the same policy as at registration'),
  })
  .strict()
  .register(schemas, { id: 'ChangePasswordRequest' });

const iso = (d: Date | string) => new Date(d).toISOString();

const signInJson = (s: SignIn) => ({
  id: s.id,
  current: s.current,
  signed_in_at: iso(s.signed_in_at),
  last_used_at: iso(s.last_used_at),
  expires_at: iso(s.expires_at),
  user_agent: s.user_agent,
  ip: s.ip,
});

const tags = ['sign-ins'];
const config = { roles: ['renter', 'provider', 'admin'] as const };
const SIGNED_IN = 'The user themselves, signed in (an API key: 403 INSUFFICIENT_SCOPE).';

export async function signInRoutes(app: App, ctx: AuthContext): Promise<void> {
  app.get(
    '/sign-ins',
    {
      config: { ...config, openapi: { headers: { 200: PAGE_HEADERS } } },
      schema: {
        tags,
        operationId: 'listSignIns',
        summary: 'Your signed-in devices, the oldest sign-in first',
        description: `${SIGNED_IN} A sign-in is listed while its refresh token is alive. Paged as every list.`,
        querystring: z.object(pageQuery),
        response: { 200: z.array(signInSchema).register(schemas, { id: 'SignInList' }), ...problems(400, 401, 403) },
      },
    },
    async (request, reply) => {
      const page = await listSignIns(ctx, callerOf(request), request.query);
      setNextPage(request, reply, page.nextCursor);
      return page.signIns.map(signInJson);
    },
  );

  app.delete(
    '/sign-ins/:id',
    {
      config,
      schema: {
        tags,
        operationId: 'signOutDevice',
        summary: 'Sign one of your devices out: its refresh token is revoked at once',
        description:
          `${SIGNED_IN} An access token it already had is refused here at once (401 SIGN_IN_ENDED) and works at the ` +
          "other services until it expires (15 minutes). Again: 204 too; another user's sign-in: 404 SIGN_IN_NOT_FOUND.",
        params: z.object({ id: z.uuid() }),
        response: { 204: noBody('signed out'), ...problems(400, 401, 403, 404) },
      },
    },
    async (request, reply) => {
      await signOut(forRequest(ctx, request), callerOf(request), request.params.id);
      return reply.code(204).send(null);
    },
  );

  app.delete(
    '/sign-ins',
    {
      config,
      schema: {
        tags,
        operationId: 'signOutOtherDevices',
        summary: 'Sign out every other device (with include_current=true, this one too)',
        description: `${SIGNED_IN} Answers how many were signed out.`,
        querystring: z.object({ include_current: zBool().default(false) }),
        response: {
          200: z.object({ signed_out: z.number().int() }).register(schemas, { id: 'SignedOut' }),
          ...problems(400, 401, 403),
        },
      },
    },
    async (request) => ({
      signed_out: await signOutOthers(forRequest(ctx, request), callerOf(request), request.query.include_current),
    }),
  );

  app.post(
    '/password',
    {
      config,
      schema: {
        tags,
        operationId: 'changePassword',
        summary: 'Change your password; every other device is signed out',
        description:
          `${SIGNED_IN} A wrong current password is 401 INVALID_CREDENTIALS and counts as a failed login of the ` +
          'account (429 past the limit); the new one meets the registration policy (400 PASSWORD_*).',
        body: passwordBody,
        response: { 204: noBody('changed'), ...problems(400, 401, 403, 429) },
      },
    },
    async (request, reply) => {
      const b = request.body;
      await changePassword(forRequest(ctx, request), callerOf(request), {
        currentPassword: b.current_password,
        newPassword: b.new_password,
      });
      return reply.code(204).send(null);
    },
  );
}
