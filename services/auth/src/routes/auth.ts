/** /api/v1/auth: register, login, refresh, logout, me. */
import { type App, callerOf, noBody, USER_ROLES } from '@gpu/common';
import { z } from 'zod';
import { currentUser, register } from '../domain/accounts/index.ts';
import type { AuthContext } from '../domain/context.ts';
import { verifyNewAccount } from '../domain/mail/recovery.ts';
import { login, logout, refresh } from '../domain/sessions.ts';
import { forRequest } from './request.ts';
import {
  emailSchema,
  loginResponseSchema,
  passwordSchema,
  problems,
  refreshBodySchema,
  roleSchema,
  schemas,
  tokenPairSchema,
  userJson,
  userSchema,
} from './schemas.ts';

const registerBodySchema = z
  .object({
    email: emailSchema,
    password: passwordSchema,
    roles: z.array(roleSchema).min(1).max(3).optional(),
  })
  .register(schemas, { id: 'RegisterRequest' });

const registerResponseSchema = z
  .object({ message: z.string(), user: userSchema })
  .describe('The new account (no token: log in next)')
  .register(schemas, { id: 'RegisterResponse' });

const loginBodySchema = z
  .object({
    email: emailSchema,
    password: passwordSchema,
    device_token: z.string().max(100).optional().describe('the device_token an earlier login returned'),
  })
  .register(schemas, { id: 'LoginRequest' });

export async function authRoutes(app: App, ctx: AuthContext): Promise<void> {
  app.post(
    '/register',
    {
      config: { public: true },
      schema: {
        tags: ['auth'],
        operationId: 'registerUser',
        summary: 'Create an account (roles renter and/or provider; renter by default)',
        description:
          'The password needs at least 8 characters (at most 128 by default), no composition rules, and must not be ' +
          'a common or breached password nor the email: a 400 names the rule that failed (PASSWORD_TOO_SHORT, ' +
          'PASSWORD_TOO_LONG, PASSWORD_COMMON, PASSWORD_CONTAINS_EMAIL). admin cannot be chosen (403).',
        body: registerBodySchema,
        response: {
          201: registerResponseSchema,
          ...problems(400, 403, 409, 429, 503),
        },
      },
    },
    async (request, reply) => {
      const user = await register(forRequest(ctx, request), request.body, request.clientIp);
      verifyNewAccount(ctx, user);
      return reply.code(201).send({ message: 'user registered', user: userJson(user) });
    },
  );

  app.post(
    '/login',
    {
      config: { public: true },
      schema: {
        tags: ['auth'],
        operationId: 'loginUser',
        summary: 'Exchange email and password for an access token and a refresh token',
        description:
          'An unknown email and a wrong password give the same 401 INVALID_CREDENTIALS. Failed logins lock an ' +
          'account (429) for clients it does not know; keep the `device_token` a login returns and send it with ' +
          'later logins: a client that has logged in before is held to a limit of its own, so failed attempts by ' +
          'others never lock its owner out.',
        body: loginBodySchema,
        response: {
          200: loginResponseSchema,
          ...problems(400, 401, 429, 503),
        },
      },
    },
    async (request) => login(forRequest(ctx, request), request.body, request.clientIp, request.headers['user-agent']),
  );

  app.post(
    '/refresh',
    {
      config: { public: true },
      schema: {
        tags: ['auth'],
        operationId: 'refreshTokens',
        summary: 'Exchange a refresh token for a new access token and a new refresh token (rotation)',
        description:
          'The presented refresh token is used up. Presenting it again later (REFRESH_TOKEN_REUSED) revokes every ' +
          'token of its session; a repeat within the configured reuse interval is answered normally.',
        body: refreshBodySchema,
        response: { 200: tokenPairSchema, ...problems(400, 401, 429, 503) },
      },
    },
    async (request) =>
      refresh(forRequest(ctx, request), request.body.refresh_token, request.clientIp, request.headers['user-agent']),
  );

  app.post(
    '/logout',
    {
      config: { public: true },
      schema: {
        tags: ['auth'],
        operationId: 'logoutUser',
        summary: "Revoke the refresh token's session (its whole token family)",
        description: 'Answers 204 whether or not the token was known, so it reveals nothing.',
        body: refreshBodySchema,
        response: { 204: noBody('session revoked'), ...problems(400, 503) },
      },
    },
    async (request, reply) => {
      await logout(forRequest(ctx, request), request.body.refresh_token);
      return reply.code(204).send(null);
    },
  );

  app.get(
    '/me',
    {
      config: { roles: USER_ROLES, scope: 'read' },
      schema: {
        tags: ['auth'],
        operationId: 'getCurrentUser',
        summary: "The account of the bearer access token (users' tokens; a machine client has no account: 403)",
        response: { 200: userSchema, ...problems(401, 403, 503) },
      },
    },
    async (request) => userJson(await currentUser(ctx, callerOf(request).subject)),
  );
}
