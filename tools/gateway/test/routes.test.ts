/**
 * One route table for the three ways the platform runs: every path of each service's OpenAPI document lies under
 * one of that service's prefixes (tools/gateway/src/routes.ts) and no other's, and docker-compose's nginx routes
 * exactly that table (deploy/gateway), read here as nginx chooses a location, with the same operators for each
 * service's health as `pnpm start`'s gateway. The Kubernetes HTTPRoutes are checked
 * against the same table in tests/k8s.test.ts.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { OPERATOR_NETWORKS, operatorsAt, parseNetwork } from '../src/operators.ts';
import {
  bodyLimitOf,
  hostKindOf,
  PORT_HOST,
  PORT_HOST_SERVICE,
  PORTS_NAME,
  ROUTES,
  SERVICE_ONLY,
  SERVICE_PORTS,
  type Service,
} from '../src/routes.ts';
import { gatewayDir } from './nginx.ts';

const root = fileURLToPath(new URL('../../..', import.meta.url));
const services = Object.keys(ROUTES) as Service[];
/** Each service's own paths, not for the public: probes, metrics, its documentation. */
const internal = /^\/(health|metrics|docs|openapi)(\/|\.|$)/;

const under = (p: string, prefix: string) => p === prefix || p.startsWith(`${prefix}/`);

interface Location {
  kind: '=' | '~' | 'prefix';
  pattern: string;
  body: string;
}

/** The `location` blocks of an nginx file (none nested), in order. */
function locations(conf: string): Location[] {
  return [...conf.matchAll(/^location (?:(=|~) )?(\S+) \{\n([\s\S]*?)^\}/gm)].map((m) => ({
    kind: (m[1] as '=' | '~' | undefined) ?? 'prefix',
    pattern: m[2]!,
    body: m[3]!,
  }));
}

/** The location nginx chooses for `uri`: an exact match, else the first matching regex, else the longest prefix. */
function choose(all: Location[], uri: string): Location | undefined {
  const exact = all.find((l) => l.kind === '=' && l.pattern === uri);
  if (exact) return exact;
  const regex = all.find((l) => l.kind === '~' && new RegExp(l.pattern).test(uri));
  if (regex) return regex;
  return all
    .filter((l) => l.kind === 'prefix' && uri.startsWith(l.pattern))
    .sort((a, b) => b.pattern.length - a.pattern.length)[0];
}

const upstreamOf = (l: Location | undefined) => /proxy_pass http:\/\/([\w-]+)(\/\S*)?;/.exec(l?.body ?? '');

describe('the route table', () => {
  it.each(services)("holds every public path of %s's OpenAPI document, under its prefixes only", (service) => {
    const doc = JSON.parse(readFileSync(path.join(root, 'services', service, 'openapi.json'), 'utf8')) as {
      paths: Record<string, unknown>;
    };
    const serviceOnly = (p: string) => SERVICE_ONLY[service].some((prefix) => under(p, prefix));
    // The paths for the platform's own services: no gateway routes them, under any service's prefix.
    for (const p of Object.keys(doc.paths).filter(serviceOnly)) {
      for (const s of services)
        expect(
          ROUTES[s].some((prefix) => under(p, prefix)),
          `${p} is not public`,
        ).toBe(false);
    }
    const paths = Object.keys(doc.paths).filter((p) => !internal.test(p) && !serviceOnly(p));
    expect(paths.length).toBeGreaterThan(0);
    for (const p of paths) {
      expect(
        ROUTES[service].some((prefix) => under(p, prefix)),
        `${service} ${p}`,
      ).toBe(true);
      for (const other of services.filter((s) => s !== service)) {
        expect(
          ROUTES[other].some((prefix) => under(p, prefix)),
          `${p} is ${service}'s, not ${other}'s`,
        ).toBe(false);
      }
    }
    // And every prefix serves some path (none is left over from a route that is gone).
    for (const prefix of ROUTES[service]) {
      expect(
        paths.some((p) => under(p, prefix)),
        `${service} ${prefix}`,
      ).toBe(true);
    }
  });
});

describe("docker-compose's nginx", () => {
  const api = readFileSync(path.join(gatewayDir, 'platform-api.conf'), 'utf8');
  const all = locations(api);

  it('routes each prefix, and everything under it, to its service, and nothing beside it', () => {
    expect(all.length).toBeGreaterThan(5);
    for (const service of services) {
      for (const prefix of ROUTES[service]) {
        for (const uri of [prefix, `${prefix}/x`, `${prefix}/x/y`]) {
          const chosen = choose(all, uri);
          if (prefix.endsWith('.json') && uri !== prefix) continue;
          expect(upstreamOf(chosen)?.[1], `${uri} goes to ${service}`).toBe(service);
          expect(upstreamOf(chosen)?.[2], `${uri} keeps its path`).toBeUndefined();
        }
        // A name that only starts like the prefix is no route.
        expect(upstreamOf(choose(all, `${prefix}x`)), `${prefix}x`).toBeNull();
      }
    }
    // What is not in the table goes nowhere: no service's /metrics either; the gateway's own are its telemetry
    // receiver's (tools/gateway/src/nginx-telemetry.ts), for operators only.
    for (const uri of ['/', '/docs', '/api/v1', '/api/v1/providers', '/health/nobody', '/metricsx']) {
      expect(upstreamOf(choose(all, uri)), uri).toBeNull();
    }
    const metrics = choose(all, '/metrics');
    expect(upstreamOf(metrics)?.slice(1)).toEqual(['gateway-telemetry', '/metrics']);
    expect(metrics?.body).toContain('include gpu-platform/operators.conf;');
  });

  it('passes a WebSocket upgrade on every routed path to its service, with an idle limit of an hour for it alone', () => {
    const directive = (body: string, name: string) => new RegExp(`^\\s*${name} (.+);$`, 'm').exec(body)?.[1];
    // Every service's location sends an upgrade on to the upgrade location, naming the service first.
    for (const service of services) {
      for (const prefix of ROUTES[service]) {
        const body = choose(all, prefix)?.body ?? '';
        const named = body.indexOf(`set $platform_service ${service};`);
        const onward = body.search(/ {2}if \(\$http_upgrade\) \{\n {4}rewrite \^ \/\.gateway\/upgrade last;\n {2}\}/);
        expect(named, prefix).toBeGreaterThanOrEqual(0);
        expect(onward, `${prefix}: upgrades go on`).toBeGreaterThan(named);
      }
    }
    // There: the same service (an upstream's name), the path as written, an hour's idle limit either way.
    const upgrade = choose(all, '/.gateway/upgrade');
    expect(upgrade?.kind).toBe('=');
    expect(upgrade?.body).toContain('internal;');
    expect(directive(upgrade!.body, 'proxy_pass')).toBe('http://$platform_service$request_uri');
    expect(directive(upgrade!.body, 'proxy_read_timeout')).toBe('1h');
    expect(directive(upgrade!.body, 'proxy_send_timeout')).toBe('1h');
    // Ordinary requests keep the server's shorter limits; no other location changes them.
    expect(directive(api, 'proxy_read_timeout')).toBe('300s');
    expect(directive(api, 'proxy_send_timeout')).toBe('300s');
    expect(all.filter((l) => /proxy_(read|send)_timeout/.test(l.body))).toEqual([upgrade]);
    // HTTP/1.1 to the services, Upgrade passed on, Connection `upgrade` for an upgrade and empty otherwise (the
    // services' keep-alive connections), anything but a WebSocket upgrade (or a raw stream to the API) refused.
    expect(directive(api, 'proxy_http_version')).toBe('1.1');
    expect(api).toMatch(/^proxy_set_header Upgrade \$http_upgrade;$/m);
    expect(api).toMatch(/^proxy_set_header Connection \$connection_upgrade;$/m);
    const http = readFileSync(path.join(gatewayDir, 'http.conf'), 'utf8');
    expect(/^map \$http_upgrade \$connection_upgrade \{\n {2}default upgrade;\n {2}"" "";\n\}/m.test(http)).toBe(true);
    expect(http).toMatch(
      /^map "\$platform_host_kind:\$http_upgrade" \$platform_upgrade_refused \{\n {2}"~:\$" 0;\n {2}"~\*:websocket\$" 0;\n {2}"~\*\^:tcp\$" 0;\n {2}default 1;\n\}/m,
    );
    expect(api).toMatch(/^if \(\$platform_upgrade_refused\) \{\n {2}rewrite \^ \/\.gateway\/bad-upgrade last;\n\}/m);
  });

  it("refuses a body larger than the path's service takes, by the route table's limits", () => {
    const bytes = (size: string) => {
      const unit = { k: 1024, m: 1024 ** 2, g: 1024 ** 3 }[size.slice(-1)];
      return unit ? Number(size.slice(0, -1)) * unit : Number(size);
    };
    // The server's limit (a line outside any location), unless the chosen location sets its own.
    const serverLimit = /^client_max_body_size (\S+);/m.exec(api)?.[1];
    expect(serverLimit).toBeDefined();
    for (const service of services) {
      for (const prefix of ROUTES[service]) {
        for (const uri of [prefix, `${prefix}/x`]) {
          const own = /client_max_body_size (\S+);/.exec(choose(all, uri)?.body ?? '')?.[1];
          expect(bytes(own ?? serverLimit!), uri).toBe(bodyLimitOf(uri));
        }
      }
    }
  });

  it("answers each service's health under its own prefix, for operators only", () => {
    for (const service of services) {
      const chosen = choose(all, `/health/${service}`);
      expect(chosen?.kind).toBe('=');
      expect(upstreamOf(chosen)?.slice(1)).toEqual([service, '/health']);
      expect(chosen?.body).toContain('include gpu-platform/operators.conf;');
    }
    const operators = readFileSync(path.join(gatewayDir, 'operators.conf'), 'utf8');
    const rules = operators.split('\n').filter((l) => /^(allow|deny) /.test(l));
    expect(rules.at(-1)).toBe('deny all;');
    expect(rules).not.toContain('allow all;');
    // The same operators as `pnpm start`'s gateway lets in unless told otherwise.
    expect(rules.slice(0, -1)).toEqual(OPERATOR_NETWORKS.map((network) => `allow ${network};`));
  });

  it('takes operators as addresses or CIDRs only: a bare slash is no /0 that lets every caller in', () => {
    const allowed = operatorsAt(['10.0.0.0/8', '192.0.2.7', '2001:db8::/32']);
    expect(['10.1.2.3', '192.0.2.7', '2001:db8::1', '::ffff:10.9.9.9'].map(allowed)).toEqual([true, true, true, true]);
    expect(['8.8.8.8', '192.0.2.8', '2001:db9::1', undefined].map(allowed)).toEqual([false, false, false, false]);
    for (const bad of [
      '10.0.0.0/',
      '10.0.0.0/8/x',
      '10.0.0.0/ 8',
      '1.2.3.4/1e1',
      '10.0.0.0/33',
      '::/129',
      'fe80::1%eth0',
      'the admins',
      '',
    ]) {
      expect(() => operatorsAt([bad]), bad).toThrow(`operators: ${JSON.stringify(bad)} is not an address or a CIDR`);
    }
    // pnpm start's nginx is given them as parsed, so it reads what the Node gateway would.
    expect(parseNetwork(' 10.0.0.0/8 ')).toEqual({ address: '10.0.0.0', prefix: 8, family: 'ipv4' });
  });

  it('sends every request to a port host to billing, as written, and a name under ports. that is none to its 404', () => {
    const http = readFileSync(path.join(gatewayDir, 'http.conf'), 'utf8');
    // The map of $host (the Host's name, lowercased, no port) is the route table's PORT_HOST, then PORTS_NAME.
    const map = /^map \$host \$platform_host_kind \{\n([\s\S]*?)^\}/m.exec(http)?.[1] ?? '';
    const entries = [...map.matchAll(/^ {2}"~\*(.+)" (\S+);$/gm)].map((m) => [m[1], m[2]]);
    expect(entries).toEqual([
      [PORT_HOST.source, 'port-host'],
      [PORTS_NAME.source, 'not-a-port-host'],
    ]);
    expect(PORT_HOST.flags).toContain('i');
    expect(map).toMatch(/^ {2}default "";$/m);
    // Read as nginx reads it (the first entry that matches), the map says what the Node gateway's rule says.
    const kindOf = (host: string) =>
      entries.find(([re]) => new RegExp(re!, 'i').test(host.toLowerCase()))?.[1] ?? 'api';
    const session = '3f2b0c1e-1111-4aaa-8bbb-0123456789ab';
    for (const host of [
      `${session}-8888.ports.localhost`,
      `${session.toUpperCase()}-1.PORTS.example.com`,
      `${session}-12345.ports.a.b`,
      `${session}-123456.ports.localhost`,
      `${session}.ports.localhost`,
      `x${session}-80.ports.localhost`,
      'foo.ports.localhost',
      'ports.localhost',
      'a.b.ports.localhost',
      `${session}-8888.portsx.localhost`,
      'api.gpu-platform.example',
      'localhost',
    ]) {
      expect(kindOf(host), host).toBe(hostKindOf(host));
    }
    // Before any location is chosen (server-level rewrites, in order): the would-be port host's 404, then a port
    // host's rewrite to its own location, ahead of the dot-segment refusal (a port host's path goes on as written).
    const notAPortHost = api.indexOf('if ($platform_host_kind = not-a-port-host) {\n  return 404;\n}');
    const portHost = api.indexOf(
      `if ($platform_host_kind = port-host) {\n  set $platform_service ${PORT_HOST_SERVICE};\n  rewrite ^ /.gateway/port-host last;\n}`,
    );
    const dotSegment = api.indexOf('rewrite ^ /.gateway/dot-segment last;');
    expect(notAPortHost).toBeGreaterThanOrEqual(0);
    expect(portHost).toBeGreaterThan(notAPortHost);
    expect(dotSegment).toBeGreaterThan(portHost);
    // There: billing, the path and query as written ($request_uri), an upload's body limit, upgrades to their hour.
    const location = choose(all, '/.gateway/port-host');
    expect(location?.kind).toBe('=');
    expect(location?.body).toContain('internal;');
    expect(location?.body).toMatch(new RegExp(`^  proxy_pass http://${PORT_HOST_SERVICE}\\$request_uri;$`, 'm'));
    expect(location?.body).toMatch(/ {2}if \(\$http_upgrade\) \{\n {4}rewrite \^ \/\.gateway\/upgrade last;\n {2}\}/);
    const limit = /client_max_body_size (\d+)g;/.exec(location?.body ?? '')?.[1];
    expect(Number(limit) * 1024 ** 3).toBe(bodyLimitOf('/', `${session}-8888.ports.localhost`));
    // The caller's Host goes on (no location sets its own headers, which would drop the server's).
    expect(api).toMatch(/^proxy_set_header Host \$platform_upstream_host;$/m);
    expect(all.filter((l) => /proxy_set_header/.test(l.body))).toEqual([]);
  });

  it('names each service by its compose name and contract port, kept alive and re-resolved', () => {
    const main = readFileSync(path.join(gatewayDir, 'nginx.conf'), 'utf8');
    for (const service of services) {
      const block = new RegExp(`upstream ${service} \\{([^}]*)\\}`).exec(main)?.[1] ?? '';
      expect(block, service).toContain(`server ${service}:${SERVICE_PORTS[service]} resolve;`);
      expect(block, service).toMatch(/keepalive \d+;/);
    }
    expect(main).toMatch(/listen 8080;\s*include gpu-platform\/platform-api\.conf;/);
    expect(main).toMatch(/listen 9000;\s*include gpu-platform\/object-store\.conf;/);
  });
});
