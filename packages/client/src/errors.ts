/** A service's problem answer as an exception, for callers that prefer throwing to checking `error`. */

/** The platform's problem body (RFC 9457 with `code`, `request_id` and, for validation, `errors`). */
export interface Problem {
  type?: string;
  title?: string;
  status?: number;
  detail?: string;
  code?: string;
  request_id?: string;
  errors?: { path: string; message: string }[];
  [key: string]: unknown;
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly problem: Problem,
  ) {
    super(`${status} ${problem.code ?? problem.title ?? 'error'}: ${problem.detail ?? ''}`.trim());
    this.name = 'ApiError';
  }

  get code(): string | undefined {
    return this.problem.code;
  }
}

/**
 * A token endpoint's refusal (a sign-in, a refresh, a key or a machine client exchanged): its status and problem as
 * every `ApiError`, and a message that names the endpoint.
 */
export class TokenRequestError extends ApiError {
  constructor(
    readonly url: string,
    status: number,
    problem: Problem,
  ) {
    super(status, problem);
    this.name = 'TokenRequestError';
    this.message = `${url} answered ${status} ${problem.code ?? ''}: ${problem.detail ?? ''}`.trim();
  }
}

/** The data of a successful answer, or throws its problem as an `ApiError`. */
export function unwrap<T>(result: { data?: T; error?: unknown; response: Response }): T {
  if (result.error !== undefined || !result.response.ok) {
    const body = (result.error ?? {}) as Problem;
    throw new ApiError(result.response.status, typeof body === 'object' && body ? body : { detail: String(body) });
  }
  return result.data as T;
}
