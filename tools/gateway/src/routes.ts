/**
 * Which service answers which public paths: one table for the three ways the platform runs. `pnpm start`'s gateway
 * routes by it; docker-compose's nginx (deploy/gateway/platform-api.conf) and the Kubernetes HTTPRoutes
 * (deploy/k8s/gateway/routes.yaml) are checked against it by their tests, and each service's OpenAPI paths against it.
 */
import { JSON_BODY_LIMIT } from '@gpu/common/oversized-body';

/** The services behind the gateway. */
export type Service = 'auth' | 'storage' | 'provider-registry' | 'billing';

/** Each service's path prefixes: a prefix and everything under it (`/objects`, `/objects/...`, not `/objectsx`). */
export const ROUTES: Record<Service, readonly string[]> = {
  auth: ['/api/v1/auth', '/.well-known/jwks.json'],
  storage: ['/objects', '/uploads', '/buckets', '/presigned-url'],
  'provider-registry': ['/providers', '/offers'],
  billing: ['/api/v1/billing', '/api/v1/wallet', '/api/v1/pricing', '/api/v1/provider', '/api/v1/deposits'],
};

/** The services, in the contract's order. */
export const SERVICES = Object.keys(ROUTES) as Service[];

/**
 * Paths a service serves to the platform's own services only, never routed by a gateway (each is a 404 there): the
 * storage service's grants, which billing asks for on the internal network, and the registry's inbox of billing's
 * messages (a leaked admin token still cannot reach them from outside).
 */
export const SERVICE_ONLY: Record<Service, readonly string[]> = {
  auth: [],
  storage: ['/grants'],
  'provider-registry': ['/messages'],
  billing: [],
};

/** The services' ports (the platform contract's), which docker-compose and Kubernetes use. */
export const SERVICE_PORTS: Record<Service, number> = {
  auth: 8000,
  storage: 8001,
  'provider-registry': 8002,
  billing: 8003,
};

/**
 * The prefixes whose bodies are object uploads, streamed to the store (objects, and the parts of resumable uploads);
 * every other prefix takes JSON bodies.
 */
export const UPLOAD_PREFIXES: readonly string[] = ['/objects', '/uploads'];

/**
 * The largest request body a gateway passes on: 6 GiB to storage's objects and upload parts (storage refuses above its own
 * `max_upload_size`, 5 GiB by default, with its 413), a service's JSON limit (1 MiB, `JSON_BODY_LIMIT`) everywhere
 * else. A larger body is refused by the gateway itself with a 413 problem, before the service sees a byte of it.
 */
const BODY_LIMITS = { upload: 6 * 1024 ** 3, json: JSON_BODY_LIMIT } as const;

/** The body limit of the prefix a path lies under (`BODY_LIMITS`). */
export function bodyLimitOf(path: string): number {
  const upload = UPLOAD_PREFIXES.some((prefix) => path === prefix || path.startsWith(`${prefix}/`));
  return upload ? BODY_LIMITS.upload : BODY_LIMITS.json;
}
