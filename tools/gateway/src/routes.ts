/**
 * Which service answers which public paths: one table for the three ways the platform runs. `pnpm start`'s gateway
 * routes by it; docker-compose's nginx (deploy/gateway/platform-api.conf) and the Kubernetes HTTPRoutes
 * (deploy/k8s/gateway/routes.yaml) are checked against it by their tests, and each service's OpenAPI paths against it.
 * The same goes for the port hosts (`PORT_HOST`): a workload's HTTP port at an origin of its own, every request to
 * which goes to billing, whatever its path.
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

/**
 * The body limit of a request (`BODY_LIMITS`): a port host's (`host`, the Host header) is an upload's, whatever its
 * path (a workload takes what it takes); elsewhere the limit of the prefix its path lies under.
 */
export function bodyLimitOf(path: string, host?: string): number {
  if (hostKindOf(host) === 'port-host') return BODY_LIMITS.upload;
  const upload = UPLOAD_PREFIXES.some((prefix) => path === prefix || path.startsWith(`${prefix}/`));
  return upload ? BODY_LIMITS.upload : BODY_LIMITS.json;
}

/**
 * A port host: the origin at which a renter's browser opens one HTTP port of a rented workload,
 * `<session-uuid>-<port>.ports.<the platform's domain>` (`3f2b0c1e-1111-4aaa-8bbb-0123456789ab-8888.ports.localhost`;
 * browsers resolve `*.localhost` to loopback, so `pnpm start` needs no DNS). Matched case-insensitively against the
 * Host header's name (its port left out). Every request to such a host, of any method, on any path (the workload's:
 * `/health` and `/api/v1/auth/...` too), a WebSocket upgrade included, goes to `PORT_HOST_SERVICE` with its path and
 * query as sent and its Host kept (billing finds the session and port by it); no route of the table applies there.
 * The one definition: the Node gateway matches by it, docker-compose's nginx (deploy/gateway/http.conf's map) and the
 * Kubernetes HTTPRoute `port-hosts` (deploy/k8s/gateway) are checked against it by their tests.
 */
export const PORT_HOST = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-[0-9]{1,5}\.ports\./i;

/** A name whose second label is `ports`: a port host, or a name that only looks like one (a 404 from the gateway). */
export const PORTS_NAME = /^[^.]+\.ports\./i;

/** The service every port host's request goes to. */
export const PORT_HOST_SERVICE: Service = 'billing';

/**
 * What a request's Host makes of it: `port-host` (`PORT_HOST`), `not-a-port-host` (under `ports.` but not one: the
 * gateway's 404 whatever the path), or `api` (the route table), for a Host header as sent (`name[:port]`, or none).
 */
export function hostKindOf(host: string | undefined): 'port-host' | 'not-a-port-host' | 'api' {
  const name = (host ?? '').replace(/:[0-9]*$/, '');
  if (PORT_HOST.test(name)) return 'port-host';
  return PORTS_NAME.test(name) ? 'not-a-port-host' : 'api';
}
