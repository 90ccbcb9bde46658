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
import { type ClientOptions, clientFetch } from './client-options.ts';
import type { components as AuthComponents, paths as AuthPaths } from './generated/auth.ts';
import type { components as BillingComponents, paths as BillingPaths } from './generated/billing.ts';
import type { components as RegistryComponents, paths as RegistryPaths } from './generated/provider-registry.ts';
import type { components as StorageComponents, paths as StoragePaths } from './generated/storage.ts';

export { type ClientOptions, clientFetch } from './client-options.ts';
export { ApiError, type Problem, TokenRequestError, unwrap } from './errors.ts';
export { endlessListGuard } from './paging.ts';
export { type RetryPolicy, resilientFetch } from './resilience.ts';
export {
  type BucketEnsured,
  type Download,
  type DownloadOptions,
  type ListOptions,
  type ListPage,
  type ObjectBody,
  type ObjectHead,
  type ObjectInfo,
  type ObjectRef,
  type ObjectStore,
  objectStore,
  type PresignedUrl,
  type Upload,
  type UploadOptions,
  type UploadPart,
  type UploadSummary,
  type Uploads,
} from './storage.ts';
export {
  type ApiKeyTokenOptions,
  apiKeyToken,
  clientCredentials,
  lazyClientCredentials,
  type MachineClientOptions,
  machineCredentials,
  staticToken,
  type TokenSource,
  userLogin,
} from './tokens.ts';
export type { AuthPaths, BillingPaths, RegistryPaths, StoragePaths };
/** Each service's named schemas: `BillingSchemas['Wallet']`, `RegistrySchemas['Provider']`, `AuthSchemas['User']`. */
export type AuthSchemas = AuthComponents['schemas'];
export type BillingSchemas = BillingComponents['schemas'];
export type RegistrySchemas = RegistryComponents['schemas'];
export type StorageSchemas = StorageComponents['schemas'];

function serviceClient<Paths extends {}>(opts: ClientOptions): Client<Paths> {
  return createClient<Paths>({ baseUrl: opts.baseUrl.replace(/\/$/, ''), fetch: clientFetch(opts) });
}

export const authClient = (opts: ClientOptions) => serviceClient<AuthPaths>(opts);
export const storageClient = (opts: ClientOptions) => serviceClient<StoragePaths>(opts);
export const registryClient = (opts: ClientOptions) => serviceClient<RegistryPaths>(opts);
export const billingClient = (opts: ClientOptions) => serviceClient<BillingPaths>(opts);
