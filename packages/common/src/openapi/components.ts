/**
 * What every service's OpenAPI document declares once and reuses by `$ref`: the response headers the platform sends
 * (docs/conventions.md) and one response per problem status, each an `application/problem+json` body of the
 * `Problem` schema.
 */
import { STATUS_CODES } from 'node:http';

/** A header object of `components.headers`. */
interface HeaderObject {
  description: string;
  schema: Record<string, unknown>;
  required?: boolean;
}

const text = { type: 'string' };

/** Every response header a route may declare (`config.openapi.headers`), by its canonical name. */
export const HEADERS = {
  'X-Request-ID': {
    description: "The request's ID: the caller's `X-Request-ID` when sane, else a generated one; on every log line",
    schema: text,
    required: true,
  },
  'X-Correlation-ID': {
    description: "The caller's `X-Correlation-ID` or a generated one; forwarded on every call and event it causes",
    schema: text,
    required: true,
  },
  'WWW-Authenticate': { description: '`Bearer`, with the reason a token was refused', schema: text, required: true },
  'Retry-After': { description: 'Seconds to wait before trying again', schema: { type: 'integer', minimum: 0 } },
  'Access-Control-Allow-Origin': {
    description:
      "CORS: the request's `Origin` when `server.cors_origins` allows it (`*`, the default, allows any); absent " +
      'without an `Origin`',
    schema: text,
  },
  'X-Next-Cursor': {
    description: "The next page's cursor (pass it as `cursor`); absent on the last page",
    schema: text,
  },
  Link: { description: 'The next page\'s URL (`<...>; rel="next"`, RFC 8288); absent on the last page', schema: text },
  'X-Next-Start-After': {
    description:
      "Deprecated: the page's last key, for the deprecated `start_after` (use `X-Next-Cursor`); absent when that key " +
      'is not printable ASCII',
    schema: text,
  },
  ETag: {
    description: 'The entity tag (quoted) of the object or resource as answered: send it back as `If-Match`',
    schema: text,
  },
  'Last-Modified': { description: 'When the object was last written (HTTP date)', schema: text },
  'Content-Length': { description: 'Bytes in the body', schema: { type: 'integer', minimum: 0 } },
  'Content-Type': { description: "The object's content type, as stored", schema: text },
  'Content-Range': { description: 'The byte range sent, `bytes <first>-<last>/<size>`', schema: text },
  'Accept-Ranges': { description: '`bytes`: ranges may be asked for', schema: text },
  'Cache-Control': {
    description: 'How the answer may be cached (`no-store`: not at all, for secrets, tokens and presigned URLs)',
    schema: text,
  },
  Pragma: { description: '`no-cache`, for HTTP/1.0 caches (with `Cache-Control: no-store` on a token)', schema: text },
  Location: {
    description: 'The URL the answer points to: the resource created, or the target of a redirect',
    schema: text,
  },
  'Idempotent-Replayed': {
    description: '`true` when this is the stored answer of an earlier request with the same `Idempotency-Key`',
    schema: text,
  },
} as const satisfies Record<string, HeaderObject>;

export type HeaderName = keyof typeof HEADERS;

/** Headers on every response. */
export const COMMON_HEADERS: readonly HeaderName[] = [
  'Access-Control-Allow-Origin',
  'X-Request-ID',
  'X-Correlation-ID',
];

/** Headers a problem of this status always declares. */
const PROBLEM_HEADERS: Partial<Record<number, HeaderName[]>> = {
  401: ['WWW-Authenticate'],
  429: ['Retry-After'],
  503: ['Retry-After'],
};

/** What each problem status means on this platform (docs/conventions.md, "Errors"). */
const PROBLEM_DESCRIPTIONS: Record<number, string> = {
  400: 'Malformed JSON, a schema violation or a bad path or query parameter (`VALIDATION_ERROR`; `errors` names each field), or another refused value (its `code` says which)',
  401: 'No valid access token (`MISSING_TOKEN`, `INVALID_TOKEN`); `WWW-Authenticate: Bearer`',
  402: 'Not enough funds (`INSUFFICIENT_FUNDS`)',
  403: "Authenticated, but the caller's role or ownership does not allow it (`ROLE_REQUIRED` or the resource's own code)",
  404: 'Not found (the `code` names what)',
  408: 'The client sent nothing for too long (`CLIENT_TIMEOUT`)',
  409: 'Already exists, or the state does not allow the action (the `code` says which)',
  412: 'A condition of the request failed: `If-Match` names a state the resource is no longer in (the `code` says which)',
  413: 'The body is larger than the route accepts (`PAYLOAD_TOO_LARGE`)',
  415: 'The body is not `application/json` (`UNSUPPORTED_MEDIA_TYPE`)',
  416: 'The asked range lies outside the object (`RANGE_NOT_SATISFIABLE`)',
  422: 'The request is well formed but cannot be processed (the `code` says why)',
  429: 'Too many attempts (`RATE_LIMITED`); `Retry-After` says when to try again',
  500: 'An unexpected error (`INTERNAL_ERROR`); the body carries no internals, the log has them under `request_id`',
  502: 'A dependency refused the request (the `code` names it)',
  503: 'A dependency (database, object store, chain, broker) is unavailable, the service is overloaded, or the request timed out (`DEPENDENCY_UNAVAILABLE`, `OVERLOADED`, `REQUEST_TIMEOUT`)',
  504: 'A dependency timed out',
};

/** The component name of a status's problem response: `NotFound`, `ServiceUnavailable`. */
export function problemResponseName(status: number): string {
  const phrase = STATUS_CODES[status] ?? `Status ${status}`;
  return phrase.replace(/[^A-Za-z0-9 ]/g, '').replace(/(?:^|\s+)(\w)/g, (_m, c: string) => c.toUpperCase());
}

/** A `$ref` to a header component. */
export const headerRef = (name: HeaderName) => ({ $ref: `#/components/headers/${name}` });

/** The headers a problem response of this status declares. */
export function problemHeaders(status: number): Record<string, { $ref: string }> {
  const names = [...COMMON_HEADERS, ...(PROBLEM_HEADERS[status] ?? [])];
  return Object.fromEntries(names.map((n) => [n, headerRef(n)]));
}

/** The problem response component of a status. */
export function problemResponse(status: number): Record<string, unknown> {
  return {
    description: PROBLEM_DESCRIPTIONS[status] ?? STATUS_CODES[status] ?? `HTTP ${status}`,
    headers: problemHeaders(status),
    content: { 'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } } },
  };
}

/** The description a problem response of this status gets unless the route gives its own. */
export const problemDescription = (status: number) => PROBLEM_DESCRIPTIONS[status] ?? STATUS_CODES[status] ?? '';
