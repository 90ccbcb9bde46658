/**
 * Typed application errors. Domain code and routes throw these; each carries a
 * *kind* (what went wrong, in the domain's words) and a stable machine `code`,
 * never an HTTP status. The one mapping in `http/problem.ts` turns a kind into
 * a status and the contract's RFC 9457 problem body, so no handler picks a
 * status code by hand and a domain rule reads the same whether it is reached
 * over HTTP, NATS or a background job.
 */

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

/**
 * What went wrong. The first group are refusals: the caller asked for something the rules do not allow, and asking
 * again unchanged gets the same answer. The rest are failures of the service or of a dependency.
 */
export const ERROR_KINDS = [
  // Refusals.
  'invalid',
  'unauthenticated',
  'forbidden',
  'not_found',
  'conflict',
  'unprocessable',
  'precondition_failed',
  'insufficient_funds',
  'too_large',
  'unsupported_media_type',
  'range_not_satisfiable',
  'rate_limited',
  'upgrade_required',
  'client_timeout',
  'headers_too_large',
  // Failures.
  'dependency_failed',
  'dependency_timeout',
  'unavailable',
  'internal',
] as const;
export type ErrorKind = (typeof ERROR_KINDS)[number];

const FAILURES: ReadonlySet<ErrorKind> = new Set([
  'dependency_failed',
  'dependency_timeout',
  'unavailable',
  'internal',
]);

export interface AppErrorOptions {
  errors?: FieldError[];
  /** Response headers the error implies (`Retry-After`, ...). */
  headers?: Record<string, string>;
  /** Extra members of the problem body (snake_case keys). */
  extra?: Record<string, unknown>;
  cause?: unknown;
  /**
   * A failure of something the caller chose, not of the platform (nothing listens on the port of a renter's own
   * server): answered with its status, logged as an answer (info), not as a failure.
   */
  callersOwn?: boolean;
}

export class AppError extends Error {
  readonly kind: ErrorKind;
  readonly code: string;
  readonly errors?: FieldError[];
  readonly headers: Record<string, string>;
  readonly extra?: Record<string, unknown>;
  readonly callersOwn: boolean;

  constructor(kind: ErrorKind, code: string, detail: string, options: AppErrorOptions = {}) {
    super(detail, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'AppError';
    this.kind = kind;
    this.code = code;
    this.errors = options.errors;
    this.headers = options.headers ?? {};
    this.extra = options.extra;
    this.callersOwn = options.callersOwn ?? false;
  }
}

export function isAppError(err: unknown): err is AppError {
  return err instanceof AppError;
}

/**
 * Whether an error is a refusal by the rules (bad input, unknown resource, wrong state, no funds): retrying the
 * same request cannot succeed. False for failures (a dependency away, a bug) and for anything not an AppError.
 */
export function isRefusal(err: unknown): err is AppError {
  return err instanceof AppError && !FAILURES.has(err.kind);
}

/** Factories for the platform-wide error kinds of the contract. */
export const errors = {
  validation: (detail: string, fieldErrors: FieldError[] = []) =>
    new AppError('invalid', 'VALIDATION_ERROR', detail, { errors: fieldErrors }),
  badRequest: (code: string, detail: string, options?: AppErrorOptions) =>
    new AppError('invalid', code, detail, options),
  unauthorized: (detail = 'missing or invalid credentials', code = 'UNAUTHORIZED') =>
    new AppError('unauthenticated', code, detail),
  forbidden: (detail = 'role not allowed', code = 'FORBIDDEN') => new AppError('forbidden', code, detail),
  notFound: (code: string, detail: string) => new AppError('not_found', code, detail),
  conflict: (code: string, detail: string, options?: AppErrorOptions) =>
    new AppError('conflict', code, detail, options),
  insufficientFunds: (detail: string, options?: AppErrorOptions) =>
    new AppError('insufficient_funds', 'INSUFFICIENT_FUNDS', detail, options),
  payloadTooLarge: (detail: string) =>
    new AppError('too_large', 'PAYLOAD_TOO_LARGE', detail, { headers: { connection: 'close' } }),
  rateLimited: (retryAfterSeconds: number) =>
    new AppError('rate_limited', 'RATE_LIMITED', `too many requests, retry after ${retryAfterSeconds} s`, {
      headers: { 'retry-after': String(retryAfterSeconds) },
    }),
  dependencyUnavailable: (dependency: string, cause?: unknown) =>
    new AppError('unavailable', 'DEPENDENCY_UNAVAILABLE', `${dependency} is unavailable`, {
      cause,
      extra: { dependency },
    }),
  timeout: (detail = 'request timed out') => new AppError('unavailable', 'REQUEST_TIMEOUT', detail),
  internal: (detail = 'internal server error') => new AppError('internal', 'INTERNAL_ERROR', detail),
};
