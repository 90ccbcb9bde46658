/**
 * The gateway's metrics, one definition for the platform's gateways that run on this package's code: the Node
 * gateway observes each request itself, and `pnpm start`'s and docker-compose's nginx through the telemetry receiver
 * (nginx-telemetry.ts), so both export the same series:
 *
 *   gateway_requests_total{upstream, method, route, status_code}              requests answered
 *   gateway_request_duration_seconds{upstream, method, route, status_code}    from the request's first byte to the
 *                                                                             answer's last (a histogram)
 *
 * `upstream` is the service the path goes to by the route table (`auth`, `storage`, `provider-registry`, `billing`;
 * the gateway's own refusals of such a path, a 413 or a 502, count under it too), `gateway` for the gateway's own paths
 * and those no service takes (compose's nginx also counts its object store and chain servers, `object-store`,
 * `solana-rpc`); `route` is the route table's prefix the path lies under (`/api/v1/billing/*`, or the prefix itself),
 * `/health`, `/health/<service>`, `/metrics`, else `unmatched`: never the raw path, so the series stay few. A port
 * host's request (routes.ts, `PORT_HOST`) counts as `upstream="billing"`, `route="port-host"`, whatever its path. The
 * Kubernetes gateway (Envoy) exports Envoy's own metrics instead (tools/gateway/README.md).
 */
import { Counter, Histogram, Registry } from 'prom-client';
import { hostKindOf, PORT_HOST_SERVICE, ROUTES, SERVICES } from './routes.ts';

/** The latency buckets, in seconds (the services' own, `http_request_duration_seconds`). */
const BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

/** The gateway's own paths (not forwarded to a service's route prefix). */
const OWN_PATHS = ['/health', '/metrics', ...SERVICES.map((s) => `/health/${s}`)];

/** The route label of every request to a port host. */
const PORT_HOST_ROUTE = 'port-host';

/**
 * The route a request lies under and the service it goes to: a port host's (`host`, its Host header) is
 * `PORT_HOST_ROUTE`'s, a name under `ports.` that is no port host the gateway's `unmatched`; else a route table prefix
 * (`/objects/*` below it, `/objects` itself) and its service; the gateway's own paths (`/health`, `/health/<service>`,
 * `/metrics`) and any other path (`unmatched`) as the gateway's, unless nginx says it proxied the request elsewhere
 * (`proxied`: compose's object store and chain servers).
 */
export function routeOf(path: string, proxied?: string, host?: string): { upstream: string; route: string } {
  const kind = hostKindOf(host);
  if (kind === 'port-host') return { upstream: PORT_HOST_SERVICE, route: PORT_HOST_ROUTE };
  if (kind === 'not-a-port-host') return { upstream: 'gateway', route: 'unmatched' };
  if (OWN_PATHS.includes(path)) return { upstream: 'gateway', route: path };
  for (const [service, prefixes] of Object.entries(ROUTES)) {
    for (const prefix of prefixes) {
      if (path === prefix) return { upstream: service, route: prefix };
      if (path.startsWith(`${prefix}/`)) return { upstream: service, route: `${prefix}/*` };
    }
  }
  return { upstream: proxied && PROXIED.has(proxied) ? proxied : 'gateway', route: 'unmatched' };
}

/** The upstreams compose's nginx proxies beside the services (its object store and chain servers, its receiver). */
const PROXIED = new Set(['object-store', 'solana-rpc', 'solana-ws', 'gateway-telemetry']);

/** One answered request, as either gateway saw it. */
export interface GatewayRequest {
  upstream: string;
  method: string;
  route: string;
  status: number;
  /** From the request's first byte to the answer's last. */
  seconds: number;
}

/** The gateway's metrics registry (Prometheus text at `metrics()`). */
export class GatewayMetrics {
  readonly registry = new Registry();
  private readonly requests = new Counter({
    name: 'gateway_requests_total',
    help: 'Requests the gateway answered, by the service that answered (upstream), method, route and status code',
    labelNames: ['upstream', 'method', 'route', 'status_code'] as const,
    registers: [this.registry],
  });
  private readonly duration = new Histogram({
    name: 'gateway_request_duration_seconds',
    help: "Requests' time at the gateway, from their first byte to the answer's last, by upstream, method, route and status code",
    labelNames: ['upstream', 'method', 'route', 'status_code'] as const,
    buckets: BUCKETS,
    registers: [this.registry],
  });

  observe(r: GatewayRequest): void {
    // A method nobody routes (any token is a method to HTTP) is counted as one: the series stay few.
    const method = KNOWN_METHODS.has(r.method) ? r.method : 'other';
    const labels = { upstream: r.upstream, method, route: r.route, status_code: String(r.status) };
    this.requests.inc(labels);
    this.duration.observe(labels, r.seconds);
  }

  metrics(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}

const KNOWN_METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);
