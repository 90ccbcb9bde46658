/**
 * The one mapping from an error's kind to HTTP: its status, the headers the
 * kind implies and the contract's RFC 9457 problem body. Domain errors never
 * name a status; everything that answers HTTP (the error handler, the raw
 * client-error answer, routes that embed a problem in a larger body) asks here.
 */
import { STATUS_CODES } from 'node:http';
import type { AppError, ErrorKind, ProblemBody } from '../errors.ts';

const STATUS_OF_KIND: Record<ErrorKind, number> = {
  invalid: 400,
  unauthenticated: 401,
  insufficient_funds: 402,
  forbidden: 403,
  not_found: 404,
  client_timeout: 408,
  conflict: 409,
  precondition_failed: 412,
  too_large: 413,
  unprocessable: 422,
  unsupported_media_type: 415,
  range_not_satisfiable: 416,
  upgrade_required: 426,
  rate_limited: 429,
  headers_too_large: 431,
  internal: 500,
  dependency_failed: 502,
  unavailable: 503,
  dependency_timeout: 504,
};

/** Headers every error of a kind carries (RFC 6750 §3: a 401 names the scheme). */
const HEADERS_OF_KIND: Partial<Record<ErrorKind, Record<string, string>>> = {
  unauthenticated: { 'www-authenticate': 'Bearer' },
};

/** The HTTP status of an error. */
export function statusOf(err: AppError): number {
  return STATUS_OF_KIND[err.kind];
}

/** The response headers of an error: those of its kind, then its own. */
export function headersOf(err: AppError): Record<string, string> {
  const own = HEADERS_OF_KIND[err.kind];
  return own ? { ...own, ...err.headers } : err.headers;
}

/** The kind a framework's 4xx status stands for (Fastify and Node errors carry statuses, not kinds). */
export function kindOfStatus(status: number): ErrorKind {
  for (const [kind, s] of Object.entries(STATUS_OF_KIND)) if (s === status) return kind as ErrorKind;
  return status >= 500 ? 'internal' : 'invalid';
}

/** The problem body of an error, without the request ID. Extras never replace the standard members. */
export function problemOf(err: AppError): ProblemBody {
  const status = statusOf(err);
  return {
    ...(err.extra ?? {}),
    type: 'about:blank',
    title: STATUS_CODES[status] ?? 'Error',
    status,
    detail: err.message,
    code: err.code,
    ...(err.errors ? { errors: err.errors } : {}),
  };
}
