/**
 * No Docker engine runs on these machines, so the compose file is checked by
 * reading it: the real dependencies are there, every service that exists is
 * built from its own Dockerfile and published on its contract port.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import YAML from 'yaml';

const root = fileURLToPath(new URL('..', import.meta.url));
const compose = YAML.parse(readFileSync(path.join(root, 'docker-compose.yml'), 'utf8'), { merge: true });
const contractPorts: Record<string, number> = { auth: 8000, storage: 8001, 'provider-registry': 8002, billing: 8003 };
const builtServices = readdirSync(path.join(root, 'services')).filter((d) =>
  existsSync(path.join(root, 'services', d, 'src/server.ts')),
);

describe('docker-compose.yml', () => {
  it('runs the real dependencies', () => {
    const images = Object.values(compose.services as Record<string, { image?: string }>).map((s) => s.image ?? '');
    for (const dep of ['postgres:', 'minio/minio', 'hashicorp/consul', 'nats:', 'solanalabs/solana']) {
      expect(
        images.some((i) => i.startsWith(dep)),
        dep,
      ).toBe(true);
    }
    expect(compose.services.nats.command).toContain('-js');
    expect(compose.services.consul.command).toContain('agent');
  });

  it.each(builtServices)('builds %s from its Dockerfile and publishes its contract port', (name) => {
    const svc = compose.services[name];
    expect(svc, `${name} is missing from docker-compose.yml`).toBeDefined();
    expect(svc.build.dockerfile).toBe(`services/${name}/Dockerfile`);
    expect(existsSync(path.join(root, svc.build.dockerfile))).toBe(true);
    expect(svc.ports).toContain(`${contractPorts[name]}:${contractPorts[name]}`);
    expect(svc.environment.CONSUL_ENABLED).toBe('true');
    const dockerfile = readFileSync(path.join(root, svc.build.dockerfile), 'utf8');
    expect(dockerfile).toContain(`EXPOSE ${contractPorts[name]}`);
    expect(dockerfile).toContain('--frozen-lockfile');
  });

  it('gives every database-backed service its own database', () => {
    const init = readFileSync(path.join(root, 'deploy/postgres/init.sql'), 'utf8');
    for (const name of builtServices) {
      const url: string | undefined = compose.services[name].environment.DATABASE_URL;
      if (!url) continue;
      const db = new URL(url).pathname.slice(1);
      expect(init).toContain(`CREATE DATABASE ${db};`);
    }
  });
});
