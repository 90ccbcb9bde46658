/**
 * No Docker engine runs on these machines, so the compose file and the Dockerfile are checked by reading them, and the
 * Dockerfile's build steps by running them outside Docker: the compose file is valid against the Compose
 * specification's JSON schema (vendored in deploy/compose-spec), the real dependencies are there, every service that
 * exists is built from the one Dockerfile at the root (the build argument SERVICE naming it), only what a user calls
 * is published (on 127.0.0.1 by default), every long-running container restarts, Consul runs with ACLs, every
 * environment variable the compose file gives a service is one that the service's configuration loader takes, and
 * `pnpm images` builds exactly the images compose and the Kubernetes manifests name. The image runs the compiled
 * program with production dependencies only: the build stage's script, run in a copy of the tree, makes a runtime
 * from which the storage service starts and answers its health check.
 */
import { execFile, execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  copyFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { builtinModules } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { PLATFORM_NATS_USERS, tracingConfigured, writeNatsSetup } from '@gpu/common';
import { freePort, gatherOutput, testEnv } from '@gpu/common/testing';
import { Ajv } from 'ajv';
import { afterAll, describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { compiledPath } from '../scripts/lib/build.ts';
import { imageCommand, imageServices } from '../scripts/lib/image.ts';
import { RULE_FILES } from '../scripts/lib/prometheus-rule.ts';
import { checkAuthConfig, loadAuthConfig } from '../services/auth/src/config.ts';
import { imageEnv } from './support/image-env.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const compose = YAML.parse(readFileSync(path.join(root, 'docker-compose.yml'), 'utf8'), { merge: true });
const dockerfile = readFileSync(path.join(root, 'Dockerfile'), 'utf8');
const contractPorts: Record<string, number> = { auth: 8000, storage: 8001, 'provider-registry': 8002, billing: 8003 };
const builtServices = readdirSync(path.join(root, 'services')).filter((d) =>
  existsSync(path.join(root, 'services', d, 'src/server.ts')),
);

interface ComposeService {
  image?: string;
  build?: { context?: string; dockerfile?: string; args?: Record<string, string> };
  environment?: Record<string, string>;
  ports?: string[];
  restart?: string;
  depends_on?: string[] | Record<string, { condition?: string }>;
  volumes?: string[];
}
const composeServices = compose.services as Record<string, ComposeService>;

/** A compose value as Docker Compose reads it with none of its variables set: `${NAME:-default}` is the default. */
const interpolated = (value: string) => value.replace(/\$\{\w+:-([^}]*)\}/g, '$1');

/** What `pnpm images` prints with --list or --dry-run (IMAGE_REPO and IMAGE_TAG unset: their defaults). */
function buildImages(...args: string[]): string[] {
  const env = { ...process.env };
  delete env.IMAGE_REPO;
  delete env.IMAGE_TAG;
  return execFileSync('bash', [path.join(root, 'scripts/build-images.sh'), ...args], { env, encoding: 'utf8' })
    .trim()
    .split('\n');
}

/** The images the Kubernetes manifests name: the base kustomization's, and each Deployment's containers'. */
function k8sImages(): string[] {
  const base = path.join(root, 'deploy/k8s/base');
  const kustomization = YAML.parse(readFileSync(path.join(base, 'kustomization.yaml'), 'utf8'));
  const names = new Set<string>((kustomization.images as Array<{ name: string }>).map((i) => i.name));
  for (const dir of readdirSync(base)) {
    const file = path.join(base, dir, 'deployment.yaml');
    if (!existsSync(file)) continue;
    for (const c of YAML.parse(readFileSync(file, 'utf8')).spec.template.spec.containers as Array<{ image: string }>)
      names.add(c.image.split(':')[0]!);
  }
  return [...names].sort();
}

// The Compose specification's schema (draft-07), checked as Docker Compose would before it runs anything. It names
// its meta-schema by the https address, which Ajv knows by the http one: the same draft-07 meta-schema under both.
// Ajv's strict type checks (union types, `additionalProperties` without `type: object`) are about how a schema is
// written, not what it accepts; the upstream schema is not written for them.
const ajv = new Ajv({ allErrors: true, strictTypes: false });
const draft07 = ajv.getSchema('http://json-schema.org/draft-07/schema')?.schema as Record<string, unknown>;
ajv.addMetaSchema({ ...draft07, $id: 'https://json-schema.org/draft-07/schema' });
const validateCompose = ajv.compile(
  JSON.parse(readFileSync(path.join(root, 'deploy/compose-spec/compose-spec.json'), 'utf8')),
);
/** The schema's complaints about a compose document, as `<path> <message>` lines. */
function composeErrors(doc: unknown): string[] {
  if (validateCompose(doc)) return [];
  return (validateCompose.errors ?? []).map(
    (e) =>
      `${e.instancePath || '/'} ${e.message}${e.params && 'additionalProperty' in e.params ? ` (${e.params.additionalProperty})` : ''}`,
  );
}

describe('docker-compose.yml', () => {
  it('is valid against the Compose specification', () => {
    expect(composeErrors(compose)).toEqual([]);
  });

  it('checks against the upstream schema named in deploy/compose-spec/README.md, unmodified', () => {
    const readme = readFileSync(path.join(root, 'deploy/compose-spec/README.md'), 'utf8');
    const sha = /SHA-256: `([0-9a-f]{64})`/.exec(readme)?.[1];
    const file = readFileSync(path.join(root, 'deploy/compose-spec/compose-spec.json'));
    expect(createHash('sha256').update(file).digest('hex')).toBe(sha);
  });

  it('fails that check with an unknown top-level key or a value of the wrong type', () => {
    const copy = () => structuredClone(compose) as Record<string, Record<string, Record<string, unknown>>>;
    const unknownKey = { ...copy(), servces: {} };
    expect(composeErrors(unknownKey)).toContain('/ must NOT have additional properties (servces)');
    const wrongType = copy();
    wrongType.services!.auth!.ports = 8000;
    expect(composeErrors(wrongType)).toContain('/services/auth/ports must be array');
    const unknownServiceKey = copy();
    unknownServiceKey.services!.auth!.restart_policy = 'always';
    expect(composeErrors(unknownServiceKey)).toContain(
      '/services/auth must NOT have additional properties (restart_policy)',
    );
  });

  it('runs the real dependencies', () => {
    const images = Object.values(composeServices).map((s) => s.image ?? '');
    for (const dep of [
      'postgres:',
      'minio/minio',
      'hashicorp/consul',
      'nats:',
      'solanalabs/solana',
      'axllent/mailpit',
    ]) {
      expect(
        images.some((i) => i.startsWith(dep)),
        dep,
      ).toBe(true);
    }
    expect(compose.services.consul.command).toContain('agent');
  });

  it("runs NATS in operator mode on auth's set-up: nats-server takes its configuration, each service its own user", async () => {
    const run = promisify(execFile);
    const nats = composeServices.nats as ComposeService & { command: string; depends_on: Record<string, unknown> };
    expect(nats.command).toBe('-c /etc/nats/nats.conf');
    expect(nats.volumes).toEqual(
      expect.arrayContaining(['./deploy/nats/nats.conf:/etc/nats/nats.conf:ro', 'natsserver:/etc/nats/setup:ro']),
    );
    // The set-up exists once auth is up.
    expect(nats.depends_on.auth).toEqual({ condition: 'service_healthy' });
    expect(composeServices.auth!.environment?.NATS_SETUP_DIR).toBe('/nats');
    expect(composeServices.auth!.volumes).toEqual(
      expect.arrayContaining(['natssetup:/nats', 'natsserver:/nats/server', 'natscreds:/nats/creds']),
    );
    // The keys (natssetup) stay auth's: no other container mounts them.
    for (const [name, svc] of Object.entries(composeServices)) {
      if (name === 'auth') continue;
      expect(
        (svc.volumes ?? []).filter((v) => v.startsWith('natssetup:')),
        name,
      ).toEqual([]);
    }
    for (const [name, identity] of [
      ['storage', undefined],
      ['provider-registry', 'REGISTRY__MESSAGING__SUBJECT_IDENTITY'],
      ['billing', 'BILLING__MESSAGING__SUBJECT_IDENTITY'],
    ] as const) {
      const env = composeServices[name]!.environment ?? {};
      expect(Object.keys(PLATFORM_NATS_USERS)).toContain(name);
      expect(env.NATS_CREDENTIALS, name).toBe(`/nats/creds/${name}.creds`);
      expect(composeServices[name]!.volumes, name).toContain('natscreds:/nats/creds:ro');
      if (identity) expect(env[identity], name).toBe('true');
    }
    // The image's /nats belongs to the service's user, so that the new volume auth writes starts writable.
    expect(dockerfile.replace(/\\\n\s*/g, ' ')).toMatch(
      /mkdir -p [^\n]*\/nats\/server \/nats\/creds[^\n]*&& chown node:node \/data \/nats \/nats\/server \/nats\/creds/,
    );
    // The real nats-server takes compose's configuration with a set-up auth would write beside it.
    const dir = mkdtempSync(path.join(tmpdir(), 'compose-nats-'));
    try {
      copyFileSync(path.join(root, 'deploy/nats/nats.conf'), path.join(dir, 'nats.conf'));
      // The server's volume holds the set-up's server/ folder alone (mounted at setup/ beside nats.conf).
      const setup = await writeNatsSetup(path.join(dir, 'auth-nats'));
      cpSync(path.dirname(setup.accounts), path.join(dir, 'setup'), { recursive: true });
      const checked = await run('nats-server', ['-t', '-c', path.join(dir, 'nats.conf')]).then(
        (r) => ({ code: 0, output: `${r.stdout}${r.stderr}` }),
        (err: { code: number; stdout: string; stderr: string }) => ({ code: err.code, output: err.stderr }),
      );
      expect(checked, checked.output).toMatchObject({ code: 0 });
      // Without the set-up it is refused: the include is not optional.
      rmSync(path.join(dir, 'setup'), { recursive: true });
      await expect(run('nats-server', ['-t', '-c', path.join(dir, 'nats.conf')])).rejects.toThrow(/accounts\.conf/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it.each(builtServices)('builds %s from the one Dockerfile and keeps its contract port inside', (name) => {
    const svc = composeServices[name];
    expect(svc, `${name} is missing from docker-compose.yml`).toBeDefined();
    expect(svc!.build?.context).toBe('.');
    expect(svc!.build?.dockerfile ?? 'Dockerfile').toBe('Dockerfile');
    expect(svc!.build?.args?.SERVICE).toBe(name);
    expect(svc!.build?.args?.PORT).toBe(String(contractPorts[name]));
    expect(svc!.ports, `${name} is reached through the gateway`).toBeUndefined();
    expect((svc as { expose?: string[] }).expose).toEqual([String(contractPorts[name])]);
    expect(interpolated(svc!.image ?? '')).toBe(`ghcr.io/gpu-platform/${name}:latest`);
    expect(svc!.environment?.CONSUL_ENABLED).toBe('true');
  });

  it('publishes only the gateway on the host, on 127.0.0.1 unless PLATFORM_BIND_ADDRESS says otherwise', () => {
    const published: Record<string, string[]> = {};
    for (const [name, svc] of Object.entries(composeServices)) {
      for (const port of svc.ports ?? []) {
        // host address:host port:container port, the address from the one variable.
        expect(port, `${name}: ${port}`).toMatch(/^\$\{PLATFORM_BIND_ADDRESS:-127\.0\.0\.1\}:\d+:\d+$/);
        published[name] = [...(published[name] ?? []), interpolated(port).split(':')[1]!];
      }
    }
    expect(published).toEqual({
      // the API (8080); the object store's S3 API for presigned URLs and downloads by redirect (9000,
      // S3_PUBLIC_ENDPOINT); the validator's JSON-RPC and WebSocket for pnpm wallet's deposits (8899, 8900)
      gateway: ['8080', '9000', '8899', '8900'],
      // the trace viewer, in the tracing profile only
      jaeger: ['16686'],
      // the dashboards, in the monitoring profile only
      grafana: ['3000'],
    });
    expect((composeServices.jaeger as { profiles?: string[] }).profiles).toEqual(['tracing']);
    expect((composeServices.grafana as { profiles?: string[] }).profiles).toEqual(['monitoring']);
    // The gateway is nginx on its files in deploy/gateway (the ones tools/gateway/test runs), recent enough to
    // re-resolve the services' names (`resolve`, nginx 1.27.3).
    const gateway = composeServices.gateway!;
    const [major, minor] = (/^nginx:(\d+)\.(\d+)/.exec(gateway.image ?? '') ?? []).slice(1).map(Number);
    expect(major! > 1 || (major === 1 && minor! >= 28)).toBe(true);
    expect(gateway.volumes).toEqual([
      './deploy/gateway/nginx.conf:/etc/nginx/nginx.conf:ro',
      './deploy/gateway:/etc/nginx/gpu-platform:ro',
    ]);
    // Auth takes a client's address from X-Forwarded-For only when the gateway sent it: it trusts exactly the
    // gateway's fixed address on the platform's subnet (a wider range would trust whatever a caller inside it wrote).
    const address = (gateway as { networks?: { default?: { ipv4_address?: string } } }).networks?.default?.ipv4_address;
    const subnet = compose.networks?.default?.ipam?.config?.[0]?.subnet as string;
    expect(address).toBeDefined();
    expect(subnet).toMatch(/^(\d+\.\d+\.\d+)\.0\/24$/);
    expect(address!.startsWith(`${subnet.split('.').slice(0, 3).join('.')}.`)).toBe(true);
    expect(composeServices.auth?.environment?.AUTH__SERVER__TRUSTED_PROXIES).toBe(address);
    expect(Object.keys(gateway.depends_on ?? {}).sort()).toEqual(
      [...builtServices, 'minio', 'solana', 'gateway-telemetry'].sort(),
    );
    expect(composeServices.storage?.environment?.S3_PUBLIC_ENDPOINT).toBe('http://localhost:9000');
  });

  it("runs the gateway's telemetry receiver where deploy/gateway's files send its lines and read its metrics", () => {
    const receiver = composeServices['gateway-telemetry'] as ComposeService & {
      expose?: string[];
      networks?: { default?: { ipv4_address?: string } };
    };
    expect(receiver.build).toEqual({ context: '.', dockerfile: 'tools/gateway/Dockerfile' });
    const image = readFileSync(path.join(root, 'tools/gateway/Dockerfile'), 'utf8');
    const syslog = /GATEWAY_TELEMETRY_SYSLOG=0\.0\.0\.0:(\d+)/.exec(image)?.[1];
    const metrics = /GATEWAY_TELEMETRY_METRICS=0\.0\.0\.0:(\d+)/.exec(image)?.[1];
    expect(image).toMatch(/^ENTRYPOINT \["node", "--enable-source-maps", "dist\/src\/telemetry-server\.js"\]$/m);
    expect(image).toMatch(/^USER node$/m);
    // nginx sends its lines to the receiver's UDP port, and passes /metrics on to its HTTP port.
    const httpConf = readFileSync(path.join(root, 'deploy/gateway/http.conf'), 'utf8');
    expect(/^access_log syslog:server=gateway-telemetry:(\d+),/m.exec(httpConf)?.[1]).toBe(syslog);
    const nginxConf = readFileSync(path.join(root, 'deploy/gateway/nginx.conf'), 'utf8');
    expect(/server gateway-telemetry:(\d+) resolve;/.exec(nginxConf)?.[1]).toBe(metrics);
    expect(receiver.expose).toEqual([`${syslog}/udp`, metrics]);
    expect(receiver.ports).toBeUndefined();
    // Its spans go where the services' go (off unless the operator sets it).
    expect(interpolated(receiver.environment?.OTEL_EXPORTER_OTLP_ENDPOINT ?? 'missing')).toBe('');
    // nginx resolves the receiver's name once, as it starts: a fixed address of its own keeps it right after a restart.
    const address = receiver.networks?.default?.ipv4_address;
    const gatewayAddress = (composeServices.gateway as typeof receiver).networks?.default?.ipv4_address;
    expect(address).toMatch(/^172\.30\.80\.\d+$/);
    expect(address).not.toBe(gatewayAddress);
  });

  it('restarts every long-running container unless stopped; a one-off set-up only on failure', () => {
    const oneOff = new Set(
      Object.values(composeServices).flatMap((svc) =>
        Object.entries(Array.isArray(svc.depends_on) ? {} : (svc.depends_on ?? {}))
          .filter(([, d]) => d.condition === 'service_completed_successfully')
          .map(([name]) => name),
      ),
    );
    // The chain's set-up, and the migration steps of the services that run as a role that owns nothing.
    expect([...oneOff].sort()).toEqual(['auth-migrate', 'billing-migrate', 'solana-setup']);
    for (const [name, svc] of Object.entries(composeServices)) {
      expect(svc.restart, name).toBe(oneOff.has(name) ? 'on-failure' : 'unless-stopped');
    }
  });

  it('runs Consul with ACLs on, deny by default, unpublished, and gives every service its token', () => {
    const consul = composeServices.consul!;
    expect(consul.ports).toBeUndefined();
    const acl = JSON.parse(interpolated(consul.environment?.CONSUL_LOCAL_CONFIG ?? '{}')).acl;
    expect(acl).toMatchObject({ enabled: true, default_policy: 'deny' });
    expect(acl.tokens.agent).toBe(acl.tokens.initial_management);
    for (const name of builtServices) {
      expect(interpolated(composeServices[name]?.environment?.CONSUL_HTTP_TOKEN ?? ''), name).toBe(
        acl.tokens.initial_management,
      );
    }
  });

  it('names the images pnpm images builds, and pnpm images builds exactly those the manifests name too', () => {
    const built = buildImages('--list');
    // A service's migration step runs the service's own image.
    const composeImages = new Set(
      Object.values(composeServices)
        .filter((svc) => svc.build)
        .map((svc) => interpolated(svc.image ?? '(no image name)')),
    );
    expect([...built].sort()).toEqual([...composeImages].sort());
    // The manifests name every image but the development chain's set-up and compose's receiver of its nginx's
    // telemetry (Kubernetes' gateway is Envoy, with telemetry of its own); their tags come from the overlays.
    const names = built.map((image) => image.split(':')[0]!);
    expect(k8sImages()).toEqual(
      names.filter((n) => !n.endsWith('/solana-setup') && !n.endsWith('/gateway-telemetry')).sort(),
    );
  });

  it('builds each image as docker-compose.yml would: the same Dockerfile and build arguments', () => {
    const commands = buildImages('--dry-run');
    for (const svc of Object.values(composeServices)) {
      if (!svc.build) continue;
      const image = interpolated(svc.image ?? '');
      const command = commands.find((c) => c.endsWith(` -t ${image} .`));
      expect(command, image).toBeDefined();
      const args = Object.entries(svc.build.args ?? {}).map(([k, v]) => `--build-arg ${k}=${v}`);
      expect(command).toBe(
        ['docker build', `-f ${svc.build.dockerfile ?? 'Dockerfile'}`, ...args, `-t ${image} .`].join(' '),
      );
    }
  });

  it('builds every image of a service from the one Dockerfile, with a SERVICE that exists under services/', () => {
    for (const [name, svc] of Object.entries(composeServices)) {
      if (!svc.build) continue;
      const service = svc.build.args?.SERVICE;
      if (service === undefined) {
        // Tools (the Solana localnet set-up, the gateway's telemetry receiver) have Dockerfiles of their own; services
        // do not.
        expect(svc.build.dockerfile, name).toMatch(/^tools\/[^/]+\/Dockerfile$/);
        continue;
      }
      expect(svc.build.dockerfile ?? 'Dockerfile', name).toBe('Dockerfile');
      expect(builtServices, `${name} builds SERVICE=${service}, which is no directory under services/`).toContain(
        service,
      );
    }
    for (const name of builtServices) expect(existsSync(path.join(root, 'services', name, 'Dockerfile'))).toBe(false);
  });

  it('gives every database-backed service its own database', () => {
    const init = readFileSync(path.join(root, 'deploy/postgres/init.sql'), 'utf8');
    for (const name of builtServices) {
      const url: string | undefined = composeServices[name]?.environment?.DATABASE_URL;
      if (!url) continue;
      const db = new URL(url).pathname.slice(1);
      expect(init).toContain(`CREATE DATABASE ${db};`);
    }
  });

  it.each(builtServices)('gives %s only environment variables that its configuration takes', async (name) => {
    // OTEL_* are OpenTelemetry's own, read by the tracing set-up (startTracing), not by the configuration.
    const { OTEL_EXPORTER_OTLP_ENDPOINT: otlp, ...environment } = composeServices[name]?.environment ?? {};
    expect(interpolated(otlp ?? 'missing'), `${name}: tracing off unless the operator sets it`).toBe('');
    expect(tracingConfigured({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://jaeger:4318' })).toBe(true);
    const configModule: Record<string, unknown> = await import(
      pathToFileURL(path.join(root, 'services', name, 'src/config.ts')).href
    );
    const loaders = Object.entries(configModule).filter(
      ([k, v]) => /^load\w*Config$/.test(k) && typeof v === 'function',
    );
    expect(loaders, `services/${name}/src/config.ts exports one load...Config(env)`).toHaveLength(1);
    const load = loaders[0]![1] as (env: NodeJS.ProcessEnv) => Record<string, unknown>;

    const dir = mkdtempSync(path.join(tmpdir(), `deploy-${name}-`));
    const badFile = path.join(dir, 'bad.yaml');
    writeFileSync(badFile, 'no_such_setting_anywhere: 1\n');
    // A configuration file named in the compose file is one inside the container; here it is a temporary one.
    const env: Record<string, string> = Object.fromEntries(
      Object.entries(environment).map(([k, v]) => [
        k,
        k.endsWith('_CONFIG_FILE') ? path.join(dir, 'config.yaml') : interpolated(v),
      ]),
    );
    const comparable = (config: Record<string, unknown>) => JSON.stringify({ ...config, instance_id: undefined });
    const baseline = comparable(load(env));
    // A variable is taken when changing its value changes the configuration or makes it invalid.
    const ignored = Object.keys(env).filter((key) => {
      const changed = key.endsWith('_CONFIG_FILE') ? badFile : `${env[key]}-changed`;
      try {
        return comparable(load({ ...env, [key]: changed })) === baseline;
      } catch {
        return false;
      }
    });
    expect(ignored, `environment of ${name} in docker-compose.yml that the service ignores`).toEqual([]);
  });

  it("starts auth and its migration step on the image's environment (production unless told): compose's is development", () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'deploy-auth-'));
    const asImageLoadsIt = (name: string) => {
      const environment = Object.entries(composeServices[name]?.environment ?? {}).map(([k, v]) => [
        k,
        // Paths inside the container are temporary ones here (the development key is written at first start).
        typeof v === 'string' && v.startsWith('/data/') ? path.join(dir, name, v) : interpolated(v),
      ]);
      const config = loadAuthConfig({ ...imageEnv({ PORT: '8000' }), ...Object.fromEntries(environment) });
      checkAuthConfig(config);
      return config;
    };
    // The migration step signs and mails nothing: the checks of the service's keys are not its own.
    expect(asImageLoadsIt('auth-migrate').database.migrate_only).toBe(true);
    const auth = asImageLoadsIt('auth');
    expect(auth.environment).toBe('development');
    expect(existsSync(auth.jwt.private_key_file!)).toBe(true);
    // The image alone (no APP_ENV) is production, which refuses to start without a key.
    expect(() => checkAuthConfig(loadAuthConfig({ ...imageEnv(), SMTP_URL: 'smtp://mail:25' }))).toThrow(
      /JWT_PRIVATE_KEY/,
    );
  });
});

describe('docker-compose.yml, profile monitoring', () => {
  type Monitoring = ComposeService & { profiles?: string[]; volumes?: string[]; expose?: string[] };
  const service = (name: string) => composeServices[name] as Monitoring;
  /** A service's read-only file mounts: the container path of each host file or folder. */
  const mounts = (name: string) =>
    Object.fromEntries(
      (service(name).volumes ?? []).map((v) => {
        const [host, container, mode] = v.split(':');
        expect(mode, `${name}: ${v}`).toBe('ro');
        return [container!, path.join(root, host!)];
      }),
    );
  /** A copy of a service's mounted files in a temporary folder, at their container paths under it. */
  function mountedTree(name: string): string {
    const dir = mkdtempSync(path.join(tmpdir(), `compose-${name}-`));
    for (const [container, host] of Object.entries(mounts(name))) {
      mkdirSync(path.dirname(path.join(dir, container)), { recursive: true });
      cpSync(host, path.join(dir, container), { recursive: true });
    }
    return dir;
  }

  it('runs Prometheus, Alertmanager and Grafana there, and only there', () => {
    for (const name of ['prometheus', 'alertmanager', 'grafana']) {
      expect(service(name)?.profiles, name).toEqual(['monitoring']);
    }
    expect(service('prometheus').depends_on).toEqual(['alertmanager']);
    expect(service('grafana').depends_on).toEqual(['prometheus']);
  });

  it("Prometheus: scrapes the four services and the gateway, loads every rule file, and sends alerts to compose's Alertmanager", async () => {
    const config = YAML.parse(readFileSync(path.join(root, 'deploy/prometheus/prometheus.yml'), 'utf8'));
    expect(mounts('prometheus')['/etc/prometheus/prometheus.yml']).toBe(
      path.join(root, 'deploy/prometheus/prometheus.yml'),
    );
    const targets = (config.scrape_configs as { job_name: string; static_configs: { targets: string[] }[] }[]).map(
      (c) => [c.job_name, c.static_configs.flatMap((s) => s.targets)],
    );
    // The gateway's metrics: its telemetry receiver's (tools/gateway/src/nginx-telemetry.ts), on the port it serves them.
    const receiverMetrics = /GATEWAY_TELEMETRY_METRICS=0\.0\.0\.0:(\d+)/.exec(
      readFileSync(path.join(root, 'tools/gateway/Dockerfile'), 'utf8'),
    )?.[1];
    expect(targets.sort()).toEqual(
      [
        ...builtServices.map((name) => [name, [`${name}:${contractPorts[name]}`]]),
        ['gateway', [`gateway-telemetry:${receiverMetrics}`]],
      ].sort(),
    );
    const [alertmanager] = config.alerting.alertmanagers[0].static_configs[0].targets as string[];
    const [host, port] = alertmanager!.split(':');
    expect(service(host!)?.expose).toContain(port);

    // promtool check config on the files as the container sees them: the rule files it finds are the mounted ones.
    const tree = mountedTree('prometheus');
    const configFile = path.join(tree, 'etc/prometheus/prometheus.yml');
    writeFileSync(
      configFile,
      readFileSync(configFile, 'utf8').replaceAll('/etc/prometheus/', `${tree}/etc/prometheus/`),
    );
    const { stdout } = await promisify(execFile)('promtool', ['check', 'config', configFile]);
    expect(stdout).toContain(`SUCCESS: ${RULE_FILES.length} rule files found`);
    const mounted = Object.values(mounts('prometheus')).map((f) => path.relative(root, f));
    for (const file of RULE_FILES) expect(mounted, file).toContain(file);
  });

  it('Alertmanager: its configuration, where the image reads it, passes amtool check-config; a broken one does not', async () => {
    const file = mounts('alertmanager')['/etc/alertmanager/alertmanager.yml'];
    expect(file).toBe(path.join(root, 'deploy/alertmanager/alertmanager.yml'));
    const { stdout } = await promisify(execFile)('amtool', ['check-config', file!]);
    expect(stdout).toContain('SUCCESS');
    const config = YAML.parse(readFileSync(file!, 'utf8'));
    // Pages and tickets by the rules' severities.
    expect(config.route.routes.map((r: { matchers: string[] }) => r.matchers)).toEqual([['severity="critical"']]);
    const broken = path.join(mkdtempSync(path.join(tmpdir(), 'alertmanager-')), 'alertmanager.yml');
    writeFileSync(broken, readFileSync(file!, 'utf8').replace('receiver: page', 'receiver: nobody'));
    await expect(promisify(execFile)('amtool', ['check-config', broken])).rejects.toMatchObject({ code: 1 });
  });

  it("Grafana: provisions compose's Prometheus as its data source and the platform's dashboard", () => {
    const tree = mountedTree('grafana');
    const sources = YAML.parse(
      readFileSync(path.join(tree, 'etc/grafana/provisioning/datasources/prometheus.yml'), 'utf8'),
    ).datasources as { type: string; url: string; isDefault?: boolean }[];
    expect(sources).toHaveLength(1);
    const url = new URL(sources[0]!.url);
    expect(sources[0]).toMatchObject({ type: 'prometheus', isDefault: true });
    expect(service(url.hostname)?.expose).toContain(url.port);
    const providers = YAML.parse(
      readFileSync(path.join(tree, 'etc/grafana/provisioning/dashboards/gpu-platform.yml'), 'utf8'),
    ).providers as { type: string; options: { path: string } }[];
    expect(providers).toHaveLength(1);
    const dashboards = readdirSync(path.join(tree, providers[0]!.options.path));
    expect(dashboards).toEqual(['gpu-platform.json']);
    const dashboard = JSON.parse(readFileSync(path.join(tree, providers[0]!.options.path, dashboards[0]!), 'utf8'));
    expect(dashboard).toMatchObject({ uid: 'gpu-platform', title: 'GPU platform' });
    // Its panels take the default Prometheus data source through the dashboard's variable.
    expect(dashboard.templating.list).toContainEqual(
      expect.objectContaining({ type: 'datasource', query: 'prometheus' }),
    );
    expect(interpolated(service('grafana').environment?.GF_SECURITY_ADMIN_PASSWORD ?? '')).not.toBe('admin');
  });
});

describe('Dockerfile', () => {
  it('builds any service named by the SERVICE argument, in stages, from the lockfile, as a non-root user', () => {
    expect(dockerfile).toMatch(/^ARG SERVICE$/m);
    expect(dockerfile).toMatch(/^FROM \S+ AS build$/m);
    expect(dockerfile.match(/^FROM /gm)).toHaveLength(2);
    expect(dockerfile).toMatch(/^RUN sh scripts\/prepare-image\.sh "\$\{SERVICE\}"$/m);
    const prepare = readFileSync(path.join(root, 'scripts/prepare-image.sh'), 'utf8');
    expect(prepare).toContain('pnpm install --offline --frozen-lockfile\n');
    expect(prepare).toContain('pnpm install --offline --frozen-lockfile --prod --filter "{./services/$SERVICE}..."');
    expect(dockerfile).toMatch(/^USER node$/m);
    expect(dockerfile).toMatch(/^EXPOSE \$\{PORT\}$/m);
    expect(dockerfile).toMatch(/^HEALTHCHECK /m);
    // Its readiness, not /health: an outage the service rides out (NATS) leaves it healthy.
    expect(dockerfile).toMatch(/^ {2}CMD \[.*'\/health\/ready'\)/m);
  });

  it("installs the pnpm of package.json's packageManager", () => {
    const { packageManager } = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8'));
    const version = /^ARG PNPM_VERSION=(\S+)$/m.exec(dockerfile)?.[1];
    expect(packageManager).toBe(`pnpm@${version}`);
  });

  it.each(builtServices)('runs %s compiled, with plain node and source maps, as pnpm start does', (name) => {
    expect(imageServices()).toContain(name);
    const pkg = JSON.parse(readFileSync(path.join(root, 'services', name, 'package.json'), 'utf8'));
    expect(pkg.name).toBe(`@gpu/${name}`);
    // The package's start script runs the source (development); the image its compiled program, with the same flags.
    const flags = /^node((?: \S+)*) --import tsx src\/server\.ts$/.exec(pkg.scripts.start)?.[1]?.trim();
    expect(flags, 'start script').toBeDefined();
    const program = path.relative(path.join(root, 'services', name), compiledPath(`services/${name}/src/server.ts`));
    expect(program).toBe('dist/src/server.js');
    expect(imageCommand(name)).toBe(['node', flags, '--enable-source-maps', program].filter(Boolean).join(' '));
    expect(pkg.dependencies.tsx, 'nothing in the image runs TypeScript').toBeUndefined();
  });

  it('runs the chain set-up image compiled too', () => {
    const tool = readFileSync(path.join(root, 'tools/solana-localnet/Dockerfile'), 'utf8');
    expect(tool).toContain('node --import tsx scripts/build-program.ts tools/solana-localnet/src/setup.ts');
    const entry = /^ENTRYPOINT (.+)$/m.exec(tool)?.[1];
    const program = path.relative(
      path.join(root, 'tools/solana-localnet'),
      compiledPath('tools/solana-localnet/src/setup.ts'),
    );
    expect(JSON.parse(entry ?? '[]')).toEqual(['node', '--enable-source-maps', program]);
    expect(tool).toMatch(/^USER node$/m);
  });

  it.each(builtServices)('gives %s every package its program imports as a production dependency', async (name) => {
    // The image holds production dependencies only: a package imported at run time (type imports vanish in the
    // compiled code) but declared for development only would be missing there.
    const esbuild = await import('esbuild');
    const result = await esbuild.build({
      entryPoints: [path.join(root, 'services', name, 'src/server.ts')],
      absWorkingDir: root,
      bundle: true,
      write: false,
      metafile: true,
      platform: 'node',
      format: 'esm',
      logLevel: 'silent',
      plugins: [
        {
          name: 'workspace-only',
          setup(b) {
            // Workspace sources are followed, as the builder follows them (scripts/lib/build.ts); packages and
            // Node's modules stay imports.
            b.onResolve({ filter: /^[^./]/ }, async (args) => {
              if (args.pluginData === 'inner') return undefined;
              if (args.path.startsWith('node:') || builtinModules.includes(args.path)) return { external: true };
              const r = await b.resolve(args.path, {
                kind: args.kind,
                resolveDir: args.resolveDir,
                importer: args.importer,
                pluginData: 'inner',
              });
              if (r.errors.length > 0) return { errors: r.errors };
              const inWorkspace = r.path.startsWith(root) && !r.path.includes(`${path.sep}node_modules${path.sep}`);
              return inWorkspace ? { path: r.path } : { external: true };
            });
          },
        },
      ],
    });
    const builtins = new Set(builtinModules);
    const missing: string[] = [];
    for (const [input, { imports }] of Object.entries(result.metafile.inputs)) {
      let dir = path.dirname(path.resolve(root, input));
      while (!existsSync(path.join(dir, 'package.json'))) dir = path.dirname(dir);
      const pkg = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8'));
      for (const imp of imports) {
        if (!imp.external || imp.path.startsWith('node:') || builtins.has(imp.path)) continue;
        const pkgName = imp.path.startsWith('@') ? imp.path.split('/').slice(0, 2).join('/') : imp.path.split('/')[0]!;
        if (!pkg.dependencies?.[pkgName]) missing.push(`${path.relative(root, dir)}: ${pkgName}`);
      }
    }
    expect([...new Set(missing)]).toEqual([]);
  });
});

describe('the image build, outside Docker', () => {
  const work = mkdtempSync(path.join(tmpdir(), 'image-build-'));
  afterAll(() => rmSync(work, { recursive: true, force: true }));

  /** The stage's lines, from `FROM ... AS <name>` (or the unnamed last stage) to the next FROM. */
  function stage(name: string | undefined): string[] {
    const stages = dockerfile.split(/^(?=FROM )/m).filter((s) => s.startsWith('FROM '));
    const found = stages.find((s) =>
      name ? s.split('\n')[0]!.endsWith(` AS ${name}`) : !/ AS \w+$/.test(s.split('\n')[0]!),
    );
    return found!.replace(/\\\n\s*/g, ' ').split('\n');
  }

  it('makes, from the build stage run in a copy of the tree, a runtime from which the storage service starts', async () => {
    const service = 'storage';
    const substitute = (line: string) => line.replaceAll(/\$\{SERVICE\}/g, service);
    // The build context: the tree as the repository has it (.dockerignore leaves out what .gitignore does).
    const context = path.join(work, 'build');
    const files = execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard', '-z'], {
      cwd: root,
      encoding: 'utf8',
    })
      .split('\0')
      .filter((f) => f && existsSync(path.join(root, f)) && statSync(path.join(root, f)).isFile());
    for (const f of files) {
      mkdirSync(path.dirname(path.join(context, f)), { recursive: true });
      cpSync(path.join(root, f), path.join(context, f));
    }
    // The build stage's commands after the tree is copied in (before it: pnpm and `pnpm fetch`, which fill the
    // package store this machine already has), run as the Dockerfile runs them.
    const build = stage('build');
    const runs = build
      .slice(build.indexOf('COPY . .'))
      .filter((l) => l.startsWith('RUN '))
      .map((l) => substitute(l.slice(4)));
    expect(runs).toEqual([`sh scripts/prepare-image.sh "${service}"`]);
    for (const command of runs) execFileSync('sh', ['-c', command], { cwd: context, stdio: 'pipe' });

    // The runtime stage: what it copies from the build stage, where it runs, what it runs.
    const runtime = path.join(work, 'app');
    mkdirSync(runtime);
    for (const line of stage(undefined).filter((l) => l.startsWith('COPY --from=build '))) {
      const [from, ...rest] = substitute(line).split(' ').slice(2);
      const dest = rest.pop()!;
      for (const source of [from!, ...rest]) {
        const target = dest.endsWith('/') ? path.join(runtime, dest, path.basename(source)) : path.join(runtime, dest);
        cpSync(path.join(context, path.relative('/app', source)), target, { recursive: true, verbatimSymlinks: true });
      }
    }
    const workdir = stage(undefined)
      .filter((l) => l.startsWith('WORKDIR '))
      .pop()!;
    const cwd = path.join(runtime, path.relative('/app', substitute(workdir.slice(8))));
    const command = readFileSync(path.join(runtime, 'start-command'), 'utf8').trim();
    expect(command).toBe(imageCommand(service));
    expect(command).not.toContain('tsx');
    // Production dependencies only: no TypeScript loader, compiler or test runner in the image.
    const store = readdirSync(path.join(runtime, 'node_modules/.pnpm'));
    for (const tool of ['tsx@', 'esbuild@', 'typescript@', 'vitest@'])
      expect(
        store.filter((p) => p.startsWith(tool)),
        tool,
      ).toEqual([]);
    expect(existsSync(path.join(cwd, 'dist/src/server.js.map'))).toBe(true);

    const port = await freePort();
    const [node, ...args] = command.split(' ');
    expect(node).toBe('node');
    const child = spawn(process.execPath, args, {
      cwd,
      // The image's environment: nothing from this machine's (no NODE_OPTIONS, no loaders).
      env: {
        PATH: process.env.PATH,
        NODE_ENV: 'production',
        PORT: String(port),
        HOST: '127.0.0.1',
        STORAGE_CONFIG_FILE: path.join(work, 'data/config.yaml'),
        S3_ENDPOINT: testEnv.s3Endpoint,
        S3_ACCESS_KEY_ID: testEnv.s3AccessKey,
        S3_SECRET_ACCESS_KEY: testEnv.s3SecretKey,
        S3_DEFAULT_BUCKET: `image-${port}`,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const output = gatherOutput(child);
    try {
      const deadline = Date.now() + 30_000;
      let health: Response | undefined;
      while (!health?.ok) {
        if (Date.now() > deadline || child.exitCode !== null) throw new Error(`storage did not start:\n${output()}`);
        await new Promise((r) => setTimeout(r, 200));
        health = await fetch(`http://127.0.0.1:${port}/health`).catch(() => undefined);
      }
      expect(await health.json()).toMatchObject({ status: 'UP', checks: { object_store: { status: 'UP' } } });
      // Access control is on in the image as everywhere: an anonymous upload is refused.
      const anonymous = await fetch(`http://127.0.0.1:${port}/objects/a.txt`, { method: 'PUT', body: 'x' });
      expect(anonymous.status).toBe(401);
    } finally {
      child.kill('SIGTERM');
      if (child.exitCode === null) await new Promise((r) => child.once('exit', r));
    }
  }, 600_000);
});
