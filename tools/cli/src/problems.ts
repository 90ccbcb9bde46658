/**
 * A failure as `gpu` tells it: the platform's problem (its HTTP status, its code, its detail), a usage error, a
 * platform out of reach or a local failure, as one line on standard error (`gpu: CODE: detail (hint)`) or, with
 * `--json`, as one JSON object there (`{"status", "code", "detail", "hint"?, "request_id"?, "errors"?}`).
 *
 * The services' details are written for any client and some name their API routes; a person at the command line is
 * told the command instead (`gpu email send`, not `POST /api/v1/auth/email/verification`), and the problems a
 * newcomer meets most (an address not verified, a key revoked or expired, a sign-in ended) say what to run next.
 */
import { ApiError, type Problem, unwrap } from '@gpu/client';
import { UsageError } from './cli.ts';
import { printable } from './format.ts';

/** What a failure comes to: `status` is the platform's HTTP status, null where the platform did not answer. */
export interface ShownProblem {
  status: number | null;
  code: string;
  detail: string;
  hint?: string;
  request_id?: string;
  errors?: { path: string; message: string }[];
}

/**
 * A failure a command has put in a problem's words itself, wholly or over the problem of the failure under it
 * (`cause`, said as any failure, with this one's fields in its place), with fields of its own a script needs (a
 * deposit's signature, a folder copy's counts): said as any other, one line or, with --json, one object with those
 * fields in it.
 */
export class ShownFailure extends Error {
  constructor(
    readonly problem: Partial<ShownProblem> & Record<string, unknown>,
    cause?: unknown,
  ) {
    super(problem.detail ?? (cause instanceof Error ? cause.message : 'failed'), { cause });
  }
}

/**
 * `unwrap`, with this command's own hint for some codes of the platform's (where the hint said for the code anywhere
 * would name the wrong command).
 */
export function unwrapHinting<T>(
  result: { data?: T; error?: unknown; response: Response },
  hints: Record<string, string>,
): T {
  try {
    return unwrap(result);
  } catch (err) {
    const hint = err instanceof ApiError && err.code !== undefined ? hints[err.code] : undefined;
    if (hint === undefined) throw err;
    throw new ShownFailure({ hint }, err);
  }
}

/** Who the run acted as, for the problems of a credential. */
export type Credential = 'GPU_API_KEY' | 'saved key' | 'sign-in' | 'none';

/** API routes a detail may name, and the command that does the same. */
const ROUTE_COMMANDS: [RegExp, string][] = [
  [/^POST \/api\/v1\/auth\/keys$/, 'gpu keys create'],
  [/^POST \/api\/v1\/auth\/email\/verification$/, 'gpu email send'],
  [/^POST \/api\/v1\/auth\/email\/verify$/, 'gpu email verify'],
  [/^POST (\/api\/v1)?\/pricing\/calculate$/, 'gpu quote'],
  [/^POST (\/api\/v1)?\/provider\/[^/\s]+\/payout$/, 'gpu provider payout'],
  [/^PUT (\/api\/v1)?\/provider\/[^/\s]+\/payout-settings$/, 'gpu provider payout-settings'],
  [/^POST (\/api\/v1)?\/wallet\/[^/\s]+\/withdraw$/, 'gpu wallet withdraw'],
  [/^POST (\/api\/v1)?\/wallet\/[^/\s]+\/deposit$/, 'gpu wallet deposit'],
];

const ROUTE = /\b(?:GET|POST|PUT|PATCH|DELETE) \/[^\s,;()]+/g;

function commandOf(route: string): string | undefined {
  return ROUTE_COMMANDS.find(([pattern]) => pattern.test(route))?.[1];
}

/**
 * A detail with the routes it names told as commands: a route with a command becomes the command; a part in brackets
 * that names a route without one is left out (what it says is for programs that call the API).
 */
function withCommands(detail: string): string {
  return detail
    .replace(/\s*\(([^()]*)\)/g, (whole, inner: string) => {
      const routes = inner.match(ROUTE) ?? [];
      if (routes.length === 0) return whole;
      if (routes.every((r) => commandOf(r) === undefined)) return '';
      return ` (${inner.replace(ROUTE, (r) => commandOf(r) ?? r)})`;
    })
    .replace(ROUTE, (r) => commandOf(r) ?? r);
}

const KEY_SOURCE: Record<Credential, string> = {
  GPU_API_KEY: 'the API key in GPU_API_KEY',
  'saved key': 'the API key saved by gpu login --api-key',
  'sign-in': 'the API key',
  none: 'the API key',
};

const NEW_KEY = 'make a new one, signed in: gpu login --email <address>, then gpu keys create <name> --scope <scope>';
const LOG_IN_AGAIN = 'gpu login --email <address>';

/** The command-line words of the problems that say what to run next. */
function explained(code: string, p: Problem, credential: Credential): { detail?: string; hint: string } | undefined {
  const key = KEY_SOURCE[credential];
  switch (code) {
    case 'EMAIL_NOT_VERIFIED': {
      const action = typeof p.action === 'string' ? p.action.replace('_', ' ') : 'this action';
      return {
        detail: `${action} need a verified e-mail address`,
        hint: 'gpu email send mails you a code, gpu email verify takes it; then run this again',
      };
    }
    case 'API_KEY_REVOKED':
      return { detail: `${key} was revoked`, hint: NEW_KEY };
    case 'API_KEY_EXPIRED':
      return { detail: `${key} has expired`, hint: NEW_KEY };
    case 'INVALID_CLIENT':
      if (credential === 'GPU_API_KEY' || credential === 'saved key' || credential === 'none') {
        return {
          detail: `${key} is not one this platform knows (mistyped, or another platform's)`,
          hint: 'gpu keys list shows your keys, signed in',
        };
      }
      return undefined;
    case 'SIGN_IN_ENDED':
    case 'REFRESH_TOKEN_REVOKED':
    case 'REFRESH_TOKEN_EXPIRED':
    case 'REFRESH_TOKEN_REUSED':
    case 'INVALID_REFRESH_TOKEN':
      return { hint: LOG_IN_AGAIN };
    case 'INSUFFICIENT_SCOPE':
      return typeof p.required_scope === 'string'
        ? { hint: `a new key with it: gpu keys create <name> --scope ${p.required_scope.split(' or ')[0]}` }
        : { hint: `sign in instead: ${LOG_IN_AGAIN}` };
    case 'INSUFFICIENT_FUNDS':
      return { hint: 'gpu wallet balance <wallet-id> shows what is there, gpu wallet deposit <wallet-id> adds to it' };
    case 'DESTINATION_REQUIRED':
      return { hint: 'name the address to pay with --to <address>' };
    case 'PRICE_NOT_ACCEPTED':
      return { hint: 'gpu quote shows the price now; --max-rate accepts a higher one' };
    default:
      return undefined;
  }
}

/** A failure as `gpu` tells it. `url`: the platform it spoke to; `credential`: who it acted as. */
export function problemOf(err: unknown, url: string, credential: Credential): ShownProblem {
  if (err instanceof ShownFailure) {
    const under = err.cause === undefined ? undefined : problemOf(err.cause, url, credential);
    return { status: null, code: 'ERROR', detail: err.message, ...under, ...err.problem };
  }
  if (err instanceof ApiError) {
    const p = err.problem;
    const code = p.code ?? String(err.status);
    const own = explained(code, p, credential);
    const detail = own?.detail ?? withCommands(p.detail ?? p.title ?? 'refused');
    return {
      status: err.status,
      code,
      detail,
      ...(own?.hint ? { hint: own.hint } : {}),
      ...(typeof p.request_id === 'string' ? { request_id: p.request_id } : {}),
      ...(Array.isArray(p.errors) && p.errors.length > 0 ? { errors: p.errors } : {}),
    };
  }
  if (err instanceof UsageError) return { status: null, code: 'USAGE_ERROR', detail: err.message };
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  if (err instanceof TypeError && cause) {
    return { status: null, code: 'UNREACHABLE', detail: `cannot reach ${url}: ${cause.code ?? cause.message}` };
  }
  return { status: null, code: 'ERROR', detail: (err as Error).message ?? String(err) };
}

const LOCAL_CODES = new Set(['USAGE_ERROR', 'UNREACHABLE', 'ERROR']);

/** The one line of standard error for a problem: `CODE: detail (hint)`, or its JSON. */
export function problemLine(p: ShownProblem, json: boolean): string {
  if (json) return JSON.stringify(p);
  // A usage error, a platform out of reach and a failure here say what went wrong, with no code to look up.
  const bare = p.status === null && LOCAL_CODES.has(p.code);
  return printable(`${bare ? '' : `${p.code}: `}${p.detail}${p.hint ? ` (${p.hint})` : ''}`);
}
