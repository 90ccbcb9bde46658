/**
 * Typed application errors. Routes and domain code throw these; the single
 * error handler in `http/error-handler.ts` turns each into the contract's
 * RFC 9457 problem body. No handler picks a status code by hand.
 */
import { STATUS_CODES } from 'node:http';

export interface FieldError {
  path: string;
  message: string;
}

export interface ProblemBody {
  type: string;
  title: string;
  status: number;
  detail: string;
  code: string;
  request_id?: string;
  errors?: FieldError[];
  [extra: string]: unknown;
}

export interface AppErrorOptions {
  errors?: FieldError[];
  headers?: Record<string, string>;
  /** Extra members of the problem body (snake_case keys). */
  extra?: Record<string, unknown>;
  cause?: unknown;
}

export class AppError extends Error {
  readonly status: number;
  readonly code: string;
  readonly errors?: FieldError[];
  readonly headers: Record<string, string>;
  readonly extra?: Record<string, unknown>;

  constructor(status: number, code: string, detail: string, options: AppErrorOptions = {}) {
    super(detail, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'AppError';
    this.status = status;
    this.code = code;
    this.errors = options.errors;
    this.headers = options.headers ?? {};
    this.extra = options.extra;
  }

  /** The problem body for this error, without the request ID. Extras never replace the standard members. */
  toProblem(): ProblemBody {
    return {
      ...(this.extra ?? {}),
      type: 'about:blank',
      title: STATUS_CODES[this.status] ?? 'Error',
      status: this.status,
      detail: this.message,
      code: this.code,
      ...(this.errors ? { errors: this.errors } : {}),
    };
  }
}

export function isAppError(err: unknown): err is AppError {
  return err instanceof AppError;
}

/** Factories for the platform-wide error kinds of the contract. */
export const errors = {
  validation: (detail: string, fieldErrors: FieldError[] = []) =>
    new AppError(400, 'VALIDATION_ERROR', detail, { errors: fieldErrors }),
  badRequest: (code: string, detail: string) => new AppError(400, code, detail),
  unauthorized: (detail = 'missing or invalid credentials', code = 'UNAUTHORIZED') =>
    new AppError(401, code, detail, { headers: { 'www-authenticate': 'Bearer' } }),
  forbidden: (detail = 'role not allowed', code = 'FORBIDDEN') => new AppError(403, code, detail),
  notFound: (code: string, detail: string) => new AppError(404, code, detail),
  conflict: (code: string, detail: string) => new AppError(409, code, detail),
  insufficientFunds: (detail: string) => new AppError(402, 'INSUFFICIENT_FUNDS', detail),
  payloadTooLarge: (detail: string) =>
    new AppError(413, 'PAYLOAD_TOO_LARGE', detail, { headers: { connection: 'close' } }),
  rateLimited: (retryAfterSeconds: number) =>
    new AppError(429, 'RATE_LIMITED', `too many requests, retry after ${retryAfterSeconds} s`, {
      headers: { 'retry-after': String(retryAfterSeconds) },
    }),
  dependencyUnavailable: (dependency: string, cause?: unknown) =>
    new AppError(503, 'DEPENDENCY_UNAVAILABLE', `${dependency} is unavailable`, {
      cause,
      extra: { dependency },
    }),
  timeout: (detail = 'request timed out') => new AppError(503, 'REQUEST_TIMEOUT', detail),
  internal: (detail = 'internal server error') => new AppError(500, 'INTERNAL_ERROR', detail),
};
