/**
 * No Docker engine runs on these machines, so the compose file and the Dockerfile are checked by reading them: the
 * compose file is valid against the Compose specification's JSON schema (vendored in deploy/compose-spec), the
 * real dependencies are there, every service that exists is built from the one Dockerfile at the root (the build
 * argument SERVICE naming it) and published on its contract port, and every environment variable the compose file
 * gives a service is one that the service's configuration loader takes.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Ajv } from 'ajv';
import { describe, expect, it } from 'vitest';
import YAML from 'yaml';

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
}
const composeServices = compose.services as Record<string, ComposeService>;

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
    for (const dep of ['postgres:', 'minio/minio', 'hashicorp/consul', 'nats:', 'solanalabs/solana']) {
      expect(
        images.some((i) => i.startsWith(dep)),
        dep,
      ).toBe(true);
    }
    expect(compose.services.nats.command).toContain('-js');
    expect(compose.services.consul.command).toContain('agent');
  });

  it.each(builtServices)('builds %s from the one Dockerfile and publishes its contract port', (name) => {
    const svc = composeServices[name];
    expect(svc, `${name} is missing from docker-compose.yml`).toBeDefined();
    expect(svc!.build?.context).toBe('.');
    expect(svc!.build?.dockerfile ?? 'Dockerfile').toBe('Dockerfile');
    expect(svc!.build?.args?.SERVICE).toBe(name);
    expect(svc!.build?.args?.PORT).toBe(String(contractPorts[name]));
    expect(svc!.ports).toContain(`${contractPorts[name]}:${contractPorts[name]}`);
    expect(svc!.environment?.CONSUL_ENABLED).toBe('true');
  });

  it('builds every image of a service from the one Dockerfile, with a SERVICE that exists under services/', () => {
    for (const [name, svc] of Object.entries(composeServices)) {
      if (!svc.build) continue;
      const service = svc.build.args?.SERVICE;
      if (service === undefined) {
        // Development tools (the Solana localnet setup) have Dockerfiles of their own; services do not.
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
    const environment = composeServices[name]?.environment ?? {};
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
      Object.entries(environment).map(([k, v]) => [k, k.endsWith('_CONFIG_FILE') ? path.join(dir, 'config.yaml') : v]),
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
});

describe('Dockerfile', () => {
  it('builds any service named by the SERVICE argument, in stages, from the lockfile, as a non-root user', () => {
    expect(dockerfile).toMatch(/^ARG SERVICE$/m);
    expect(dockerfile).toMatch(/^FROM \S+ AS build$/m);
    expect(dockerfile.match(/^FROM /gm)).toHaveLength(2);
    expect(dockerfile).toContain('--frozen-lockfile');
    expect(dockerfile).toMatch(/--filter "\{\.\/services\/\$\{SERVICE\}\}\.\.\."/);
    expect(dockerfile).toMatch(/^USER node$/m);
    expect(dockerfile).toMatch(/^EXPOSE \$\{PORT\}$/m);
    expect(dockerfile).toMatch(/^HEALTHCHECK /m);
  });

  it("installs the pnpm of package.json's packageManager", () => {
    const { packageManager } = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8'));
    const version = /^ARG PNPM_VERSION=(\S+)$/m.exec(dockerfile)?.[1];
    expect(packageManager).toBe(`pnpm@${version}`);
  });

  it.each(builtServices)("can run %s: its package's start script is the node command line the image runs", (name) => {
    const pkg = JSON.parse(readFileSync(path.join(root, 'services', name, 'package.json'), 'utf8'));
    expect(pkg.name).toBe(`@gpu/${name}`);
    expect(pkg.scripts.start).toMatch(/^node (\S+ )*--import tsx src\/server\.ts$/);
    expect(pkg.dependencies.tsx, 'tsx runs the service, so it is a production dependency').toBeDefined();
  });
});
