/**
 * /api/v1/auth/email/* and /api/v1/auth/password/{forgot,reset}: verifying a user's address and resetting a forgotten
 * password with a token mailed to it (domain/mail/recovery.ts).
 */
import { type App, authenticate, callerOf, noBody } from '@gpu/common';
import { z } from 'zod';
import type { AuthContext } from '../domain/context.ts';
import { forgotPassword, requestVerification, resetPassword, verifyEmail } from '../domain/mail/recovery.ts';
import { forRequest } from './request.ts';
import { emailSchema, passwordSchema, problems, schemas, userJson, userSchema } from './schemas.ts';

const tokenSchema = z.string().min(1).max(200).describe('the code of the mail');

const acceptedSchema = z
  .object({ message: z.string() })
  .describe('Accepted: a mail is on its way (or, for an address without an account, nothing: the answer is the same)')
  .register(schemas, { id: 'MailAccepted' });

const tags = ['recovery'];
const MAIL_OFF = 'A platform without an SMTP server (mail.smtp_url) answers 503 MAIL_UNAVAILABLE.';

export async function recoveryRoutes(app: App, ctx: AuthContext): Promise<void> {
  app.post(
    '/email/verification',
    {
      config: { roles: ['renter', 'provider', 'admin'] },
      schema: {
        tags,
        operationId: 'requestEmailVerification',
        summary: 'Mail yourself a link (a code) that verifies your address',
        description:
          'The user themselves, signed in (an API key: 403 INSUFFICIENT_SCOPE). The code works once, for ' +
          `recovery.verify_token_ttl (24 h); asking again is limited (429). An address already verified: 409. ${MAIL_OFF}`,
        response: { 202: acceptedSchema, ...problems(401, 403, 409, 415, 429, 503) },
      },
    },
    async (request, reply) => {
      await requestVerification(forRequest(ctx, request), callerOf(request));
      return reply.code(202).send({ message: 'a verification link is on its way to your address' });
    },
  );

  app.post(
    '/email/verify',
    {
      config: { public: true, openapi: { tokenOptional: true } },
      schema: {
        tags,
        operationId: 'verifyEmail',
        summary: 'Verify an address with the code mailed to it: the account, verified',
        description:
          "The code is the proof that the caller reads mail at the address. Sent with the account's own sign-in " +
          "(`Authorization: Bearer`, a user's token of that account: its holder knows the password), it verifies the " +
          'address and changes nothing else. Sent without it, it takes `new_password` (the registration policy, 400 ' +
          "PASSWORD_*) and makes the account the mail reader's alone, as a reset does: every sign-in, trusted device, " +
          'API key and daemon client made before ends (whoever registered the address first keeps nothing). Neither: ' +
          '400 NEW_PASSWORD_REQUIRED, the code still unused. Unknown, used and expired codes are one answer, 400 ' +
          'INVALID_EMAIL_TOKEN; a bearer token that is not valid, 401. Tokens issued from now on say email_verified ' +
          '(log in or refresh for one).',
        body: z
          .object({
            token: tokenSchema,
            new_password: passwordSchema
              .optional()
              .describe("the account's password from now on; needed without the account's own sign-in"),
          })
          .register(schemas, { id: 'VerifyEmailRequest' }),
        response: { 200: userSchema, ...problems(400, 401, 429) },
      },
    },
    async (request) => {
      // The sign-in is optional here: whose it is decides what the code does.
      const caller = request.headers.authorization === undefined ? null : await authenticate(request);
      const b = request.body;
      const input = { token: b.token, ...(b.new_password === undefined ? {} : { newPassword: b.new_password }) };
      return userJson(await verifyEmail(forRequest(ctx, request), input, caller, request.clientIp));
    },
  );

  app.post(
    '/password/forgot',
    {
      config: { public: true },
      schema: {
        tags,
        operationId: 'forgotPassword',
        summary: 'Mail a password-reset link (a code) to an address, if it has an account',
        description:
          'Always 202 with the same body, taking the same time, whether the address has an account or not. The ' +
          'code works once, for recovery.reset_token_ttl (30 min). Requests per client address are limited (429); ' +
          `past rate_limit.reset_per_account mails to one address, nothing more is sent (the answer is the same). ${MAIL_OFF}`,
        body: z.object({ email: emailSchema }).register(schemas, { id: 'ForgotPasswordRequest' }),
        response: { 202: acceptedSchema, ...problems(400, 429, 503) },
      },
    },
    async (request, reply) => {
      await forgotPassword(forRequest(ctx, request), request.body.email, request.clientIp);
      return reply.code(202).send({ message: 'if the address has an account, a reset link is on its way to it' });
    },
  );

  app.post(
    '/password/reset',
    {
      config: { public: true },
      schema: {
        tags,
        operationId: 'resetPassword',
        summary: 'Set a new password with a mailed reset code; every device is signed out',
        description:
          'The new password meets the registration policy (400 PASSWORD_*; the code keeps working for another try). ' +
          'Unknown, used and expired codes are one answer, 400 INVALID_EMAIL_TOKEN. The account starts afresh: every ' +
          'sign-in, trusted device, API key and daemon client ends; the reset also verifies the address, ends its ' +
          'other mailed codes, and mails a notice.',
        body: z
          .object({ token: tokenSchema, new_password: passwordSchema })
          .register(schemas, { id: 'ResetPasswordRequest' }),
        response: { 204: noBody('the password is changed'), ...problems(400, 429) },
      },
    },
    async (request, reply) => {
      const b = request.body;
      await resetPassword(forRequest(ctx, request), { token: b.token, newPassword: b.new_password }, request.clientIp);
      return reply.code(204).send(null);
    },
  );
}
