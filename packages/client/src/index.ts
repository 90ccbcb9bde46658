/**
 * The platform's typed HTTP client: one client per service, typed from the service's OpenAPI document
 * (openapi-typescript + openapi-fetch), with the glue every caller needs: a bearer token on every request (a static
 * one, or a machine client's, fetched with client credentials and renewed before it expires), the correlation ID,
 * a time limit per attempt, and bounded retries where a retry cannot do harm.
 *
 *   const tokens = clientCredentials({ authUrl, clientId, clientSecret });
 *   const registry = registryClient({ baseUrl: 'http://127.0.0.1:8002', token: tokens });
 *   const provider = unwrap(await registry.GET('/providers/{providerID}', { params: { path: { providerID } } }));
 */
import createClient, { type Client } from 'openapi-fetch';
import type { paths as AuthPaths } from './generated/auth.ts';
import type { paths as BillingPaths } from './generated/billing.ts';
import type { paths as RegistryPaths } from './generated/provider-registry.ts';
import type { paths as StoragePaths } from './generated/storage.ts';
import { resilientFetch } from './resilience.ts';
import type { TokenSource } from './tokens.ts';

export { ApiError, unwrap } from './errors.ts';
export { type RetryPolicy, resilientFetch } from './resilience.ts';
export { clientCredentials, staticToken, type TokenSource, userLogin } from './tokens.ts';
export type { AuthPaths, BillingPaths, RegistryPaths, StoragePaths };

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

function serviceClient<Paths extends {}>(opts: ClientOptions): Client<Paths> {
  return createClient<Paths>({
    baseUrl: opts.baseUrl.replace(/\/$/, ''),
    fetch: resilientFetch({
      token: opts.token,
      correlationId: opts.correlationId,
      timeoutMs: opts.timeoutMs ?? 10_000,
      retries: opts.retries ?? 2,
      fetch: opts.fetch ?? globalThis.fetch,
    }),
  });
}

export const authClient = (opts: ClientOptions) => serviceClient<AuthPaths>(opts);
export const storageClient = (opts: ClientOptions) => serviceClient<StoragePaths>(opts);
export const registryClient = (opts: ClientOptions) => serviceClient<RegistryPaths>(opts);
export const billingClient = (opts: ClientOptions) => serviceClient<BillingPaths>(opts);
