/**
 * The one error handler: every error becomes the contract's problem body.
 * A 500 never carries a stack trace or SQL text; the log line does.
 */
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { hasZodFastifySchemaValidationErrors, isResponseSerializationError } from 'fastify-type-provider-zod';
import { isDependencyDown } from '../dependency-errors.ts';
import { AppError, errors, type FieldError } from '../errors.ts';
import { headersOf, kindOfStatus, problemOf, statusOf } from './problem.ts';
import { unknownKeysAsFields } from './strict-input.ts';

export const PROBLEM_CONTENT_TYPE = 'application/problem+json; charset=utf-8';

/**
 * Maps any thrown value to an AppError. `wildcard`: the name the route's trailing wildcard has in its document
 * (`objectKey` for `/objects/:bucketName/*`), which a validation error of `params` names instead of `*`.
 */
export function toAppError(err: unknown, wildcard?: string): AppError {
  if (err instanceof AppError) return err;
  if (hasZodFastifySchemaValidationErrors(err)) {
    const context = (err as { validationContext?: string }).validationContext ?? 'body';
    const named = (segment: string) => (context === 'params' && segment === '*' && wildcard ? wildcard : segment);
    const fieldErrors: FieldError[] = unknownKeysAsFields(err.validation).map((v) => ({
      path: [context, ...v.instancePath.split('/').filter(Boolean).map(named)].join('.'),
      message: v.message ?? 'invalid value',
    }));
    return errors.validation(
      `invalid ${context}: ${fieldErrors.map((f) => `${f.path}: ${f.message}`).join('; ')}`,
      fieldErrors,
    );
  }
  const fe = err as FastifyError;
  if (fe && typeof fe === 'object' && fe.validation) {
    const context = fe.validationContext ?? 'request';
    const fieldErrors = fe.validation.map((v) => ({
      path: [context, ...v.instancePath.split('/').filter(Boolean)].join('.'),
      message: v.message ?? 'invalid value',
    }));
    return errors.validation(`invalid ${context}`, fieldErrors);
  }
  if (isDependencyDown(err)) return errors.dependencyUnavailable('a dependency', err);
  if (fe && typeof fe.statusCode === 'number' && fe.statusCode >= 400 && fe.statusCode < 500) {
    switch (fe.code) {
      case 'FST_ERR_CTP_INVALID_JSON_BODY':
      case 'FST_ERR_CTP_EMPTY_JSON_BODY':
        return errors.badRequest('MALFORMED_JSON', fe.message);
      case 'FST_ERR_CTP_BODY_TOO_LARGE':
        return errors.payloadTooLarge(fe.message);
      case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
        return new AppError('unsupported_media_type', 'UNSUPPORTED_MEDIA_TYPE', fe.message);
      default: {
        if (err instanceof SyntaxError) return errors.badRequest('MALFORMED_JSON', fe.message);
        const code = fe.statusCode === 429 ? 'RATE_LIMITED' : (fe.code ?? 'BAD_REQUEST').replace(/^FST_ERR_/, '');
        return new AppError(kindOfStatus(fe.statusCode), code, fe.message);
      }
    }
  }
  return errors.internal();
}

/** Sends the problem body for an AppError. */
export function sendProblem(request: FastifyRequest, reply: FastifyReply, appError: AppError) {
  for (const [k, v] of Object.entries(headersOf(appError))) reply.header(k, v);
  return reply
    .code(statusOf(appError))
    .type(PROBLEM_CONTENT_TYPE)
    .serializer(JSON.stringify)
    .send({ ...problemOf(appError), request_id: request.id });
}

/** Logs an error and answers its problem body (or cuts a response already under way). */
export function answerError(err: unknown, request: FastifyRequest, reply: FastifyReply) {
  const appError = toAppError(err, request.routeOptions?.config?.openapi?.wildcard ?? 'path');
  const status = statusOf(appError);
  if (status >= 500 && !appError.callersOwn) {
    const detail = isResponseSerializationError(err) ? { issues: err.cause.issues } : {};
    request.log.error({ err, ...detail }, 'request failed');
  } else {
    request.log.info({ code: appError.code, status }, appError.message);
  }
  if (reply.sent || reply.raw.headersSent) {
    reply.raw.destroy();
    return;
  }
  return sendProblem(request, reply, appError);
}

export function installErrorHandling(app: FastifyInstance) {
  app.setErrorHandler(answerError);
  app.setNotFoundHandler((request, reply) =>
    sendProblem(
      request,
      reply,
      errors.notFound('ROUTE_NOT_FOUND', `no route for ${request.method} ${request.url.split('?')[0]}`),
    ),
  );
}
