/**
 * Which service answers which public paths: one table for the three ways the platform runs. `pnpm start`'s gateway
 * routes by it; docker-compose's nginx (deploy/gateway/platform-api.conf) and the Kubernetes HTTPRoutes
 * (deploy/k8s/gateway/routes.yaml) are checked against it by their tests, and each service's OpenAPI paths against it.
 */

/** The services behind the gateway. */
export type Service = 'auth' | 'storage' | 'provider-registry' | 'billing';

/** Each service's path prefixes: a prefix and everything under it (`/objects`, `/objects/...`, not `/objectsx`). */
export const ROUTES: Record<Service, readonly string[]> = {
  auth: ['/api/v1/auth', '/.well-known/jwks.json'],
  storage: ['/objects', '/buckets', '/presigned-url'],
  'provider-registry': ['/providers', '/offers', '/prices'],
  billing: ['/api/v1/billing', '/api/v1/wallet', '/api/v1/pricing', '/api/v1/provider', '/api/v1/deposits'],
};

/** The services' ports (the platform contract's), which docker-compose and Kubernetes use. */
export const SERVICE_PORTS: Record<Service, number> = {
  auth: 8000,
  storage: 8001,
  'provider-registry': 8002,
  billing: 8003,
};
