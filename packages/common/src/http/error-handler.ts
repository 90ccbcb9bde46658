/**
 * The one error handler: every error becomes the contract's problem body.
 * A 500 never carries a stack trace or SQL text; the log line does.
 */
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { hasZodFastifySchemaValidationErrors, isResponseSerializationError } from 'fastify-type-provider-zod';
import { AppError, errors, type FieldError } from '../errors.ts';

export const PROBLEM_CONTENT_TYPE = 'application/problem+json; charset=utf-8';

const TRANSIENT_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EPIPE',
  '57P01', // admin_shutdown
  '57P02',
  '57P03', // cannot_connect_now
  '08000',
  '08001',
  '08003',
  '08004',
  '08006',
  '53300', // too_many_connections
]);

/** Whether an error says a dependency (database, store, RPC) could not be reached. */
export function isDependencyDown(err: unknown): boolean {
  if (typeof err !== 'object' || err === null) return false;
  const e = err as { code?: unknown; cause?: unknown; message?: unknown; name?: unknown };
  if (typeof e.code === 'string' && TRANSIENT_CODES.has(e.code)) return true;
  if (
    typeof e.message === 'string' &&
    /Connection terminated|connect ECONNREFUSED|timeout exceeded when trying to connect/i.test(e.message)
  ) {
    return true;
  }
  if (e.name === 'AggregateError' && Array.isArray((err as AggregateError).errors)) {
    return (err as AggregateError).errors.some(isDependencyDown);
  }
  return e.cause !== undefined && e.cause !== err && isDependencyDown(e.cause);
}

/** Maps any thrown value to an AppError. */
export function toAppError(err: unknown): AppError {
  if (err instanceof AppError) return err;
  if (hasZodFastifySchemaValidationErrors(err)) {
    const context = (err as { validationContext?: string }).validationContext ?? 'body';
    const fieldErrors: FieldError[] = err.validation.map((v) => ({
      path: [context, ...v.instancePath.split('/').filter(Boolean)].join('.'),
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
        return new AppError(400, 'MALFORMED_JSON', fe.message);
      case 'FST_ERR_CTP_BODY_TOO_LARGE':
        return errors.payloadTooLarge(fe.message);
      case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
        return new AppError(415, 'UNSUPPORTED_MEDIA_TYPE', fe.message);
      default: {
        if (err instanceof SyntaxError) return new AppError(400, 'MALFORMED_JSON', fe.message);
        const code = fe.statusCode === 429 ? 'RATE_LIMITED' : (fe.code ?? 'BAD_REQUEST').replace(/^FST_ERR_/, '');
        const headers: Record<string, string> = {};
        return new AppError(fe.statusCode, code, fe.message, { headers });
      }
    }
  }
  return errors.internal();
}

/** Sends the problem body for an AppError. */
export function sendProblem(request: FastifyRequest, reply: FastifyReply, appError: AppError) {
  for (const [k, v] of Object.entries(appError.headers)) reply.header(k, v);
  return reply
    .code(appError.status)
    .type(PROBLEM_CONTENT_TYPE)
    .serializer(JSON.stringify)
    .send({ ...appError.toProblem(), request_id: request.id });
}

/** Logs an error and answers its problem body (or cuts a response already under way). */
export function answerError(err: unknown, request: FastifyRequest, reply: FastifyReply) {
  const appError = toAppError(err);
  if (appError.status >= 500) {
    const detail = isResponseSerializationError(err) ? { issues: err.cause.issues } : {};
    request.log.error({ err, ...detail }, 'request failed');
  } else {
    request.log.info({ code: appError.code, status: appError.status }, appError.message);
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
