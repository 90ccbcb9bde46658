/**
 * The fetch every service client calls through:
 * - the bearer token of the client's `TokenSource` (unless the request names its own `authorization`), renewed once
 *   when a service answers 401 (a token revoked or rotated under it);
 * - `X-Correlation-ID` when the caller has one, so a call is traced across services;
 * - a time limit per attempt, until the response's headers arrive (a long download is not cut; 0: none, for an
 *   upload, whose answer comes only once all of its body is sent);
 * - bounded retries with exponential backoff and jitter, honouring `Retry-After`, only where a retry cannot do harm:
 *   idempotent methods (GET, HEAD, PUT, DELETE, OPTIONS) or a request carrying an `Idempotency-Key`; on a network
 *   error, a timeout, 429, 502, 503 or 504. Anything else is answered as it came. A request whose body is read once
 *   (`replay: false`: a streamed upload) is sent once.
 */
import type { TokenSource } from './tokens.ts';

export interface RetryPolicy {
  token?: TokenSource;
  correlationId?: () => string | undefined;
  /** Time limit of one attempt until the response's headers arrive, and for a JSON answer its body; 0 for none. */
  timeoutMs: number;
  /**
   * Whether a JSON answer's body is held to `timeoutMs` too (default true): false where the caller streams what it
   * gets, whatever its type (a download of an object stored as JSON).
   */
  timeBody?: boolean;
  retries: number;
  fetch: typeof fetch;
  /** First backoff (default 100 ms), doubled per attempt, at most `maxBackoffMs` (default 2 s). */
  baseBackoffMs?: number;
  maxBackoffMs?: number;
  /**
   * Whether a request may be sent again (default true). False for a body read once from a stream (an upload): the
   * request goes out once as it is, never copied (a copy would keep the whole body in memory for a second try), so
   * no retry and no renewal of a refused token.
   */
  replay?: boolean;
}

const IDEMPOTENT = new Set(['GET', 'HEAD', 'PUT', 'DELETE', 'OPTIONS']);
const RETRY_STATUS = new Set([429, 502, 503, 504]);

/** Seconds of a `Retry-After` header (delta-seconds form), in ms, or undefined. */
function retryAfterMs(res: Response): number | undefined {
  const value = res.headers.get('retry-after');
  if (!value || !/^\d+$/.test(value)) return undefined;
  return Number(value) * 1000;
}

/** Uses its arguments, so that an async function holds them until the point it is called. */
function keepAlive(..._values: unknown[]): void {}

class AttemptTimeout extends Error {
  constructor(ms: number) {
    super(`no response within ${ms} ms`);
    this.name = 'TimeoutError';
  }
}

export function resilientFetch(policy: RetryPolicy): (input: Request) => Promise<Response> {
  const base = policy.baseBackoffMs ?? 100;
  const cap = policy.maxBackoffMs ?? 2000;
  const backoff = (attempt: number, floor = 0) => Math.max(floor, Math.random() * Math.min(cap, base * 2 ** attempt));

  async function attempt(request: Request): Promise<Response> {
    const headers = new Headers(request.headers);
    if (policy.token && !headers.has('authorization')) {
      headers.set('authorization', `Bearer ${await policy.token.get()}`);
    }
    const correlationId = policy.correlationId?.();
    if (correlationId && !headers.has('x-correlation-id')) headers.set('x-correlation-id', correlationId);
    const controller = new AbortController();
    let timer =
      policy.timeoutMs > 0
        ? setTimeout(() => controller.abort(new AttemptTimeout(policy.timeoutMs)), policy.timeoutMs)
        : undefined;
    const signal = AbortSignal.any([controller.signal, request.signal]);
    let outgoing: Request | undefined;
    try {
      // A streamed body needs `duplex: 'half'` (Node's fetch).
      const init = { headers, signal, ...(request.body ? { duplex: 'half' } : {}) } as RequestInit;
      outgoing = new Request(request, init);
      const res = await policy.fetch(outgoing);
      const json = /json/i.test(res.headers.get('content-type') ?? '');
      if (timer === undefined || !res.body || !json || policy.timeBody === false) return res;
      // An API's answer (JSON), which its caller reads whole: the time limit covers its body too, so that a server
      // sending the headers and then nothing (or a byte now and then) cannot hold the caller (a daemon's heartbeat)
      // past it. A stream (a download) is timed to its headers alone.
      const pending = timer;
      timer = undefined;
      // Never what keeps a process alive (a body cancelled unread leaves it set; a stalled read holds its socket).
      pending.unref?.();
      const body = res.body.pipeThrough(new TransformStream({ flush: () => clearTimeout(pending) }));
      return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
    } finally {
      clearTimeout(timer);
      // Held until the fetch settles: a Request follows the signal it was given only through a weak reference, so a
      // garbage collection during a long upload could drop the Request made here (nothing else holds it) and with it
      // the link to the caller's signal: the caller's abort would never reach the fetch.
      keepAlive(request, signal, outgoing);
    }
  }

  return async (request: Request) => {
    if (policy.replay === false) return attempt(request);
    const retryable = IDEMPOTENT.has(request.method) || request.headers.has('idempotency-key');
    let renewed = false;
    for (let n = 0; ; n++) {
      const canRetry = retryable && n < policy.retries;
      let res: Response;
      try {
        res = await attempt(request.clone());
      } catch (err) {
        // The caller's own abort is final; a timeout or a network error is retried where that is safe.
        if (request.signal.aborted || !canRetry) throw err;
        await new Promise((r) => setTimeout(r, backoff(n)));
        continue;
      }
      if (res.status === 401 && policy.token?.invalidate && !renewed && !request.headers.has('authorization')) {
        renewed = true;
        policy.token.invalidate();
        await res.body?.cancel();
        n--;
        continue;
      }
      if (!RETRY_STATUS.has(res.status) || !canRetry) return res;
      await res.body?.cancel();
      await new Promise((r) => setTimeout(r, Math.min(backoff(n, retryAfterMs(res)), 5000)));
    }
  };
}
