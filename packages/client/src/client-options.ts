/** What every service client is made from, and the fetch it calls through. */
import { resilientFetch } from './resilience.ts';
import type { TokenSource } from './tokens.ts';

export interface ClientOptions {
  /** The service's base URL, e.g. `http://127.0.0.1:8002`. */
  baseUrl: string;
  /** The caller's token; none for public routes only. */
  token?: TokenSource;
  /** The correlation ID to send (`X-Correlation-ID`), read per request: the caller's own request's, typically. */
  correlationId?: () => string | undefined;
  /** Time limit of one attempt (default 10 s). */
  timeoutMs?: number;
  /** Further attempts after a failure that may be retried (default 2). */
  retries?: number;
  /** The fetch to call (default the global one). */
  fetch?: typeof fetch;
}

/**
 * The fetch a client of these options calls through (`replay: false` for a request whose body is a stream;
 * `timeBody: false` for answers streamed to the caller, whose bodies have no time limit).
 */
export function clientFetch(
  opts: ClientOptions,
  replay = true,
  timeBody = true,
): (input: Request) => Promise<Response> {
  return resilientFetch({
    timeBody,
    token: opts.token,
    correlationId: opts.correlationId,
    timeoutMs: opts.timeoutMs ?? 10_000,
    retries: opts.retries ?? 2,
    fetch: opts.fetch ?? globalThis.fetch,
    replay,
  });
}
