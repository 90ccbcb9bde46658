import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { configWarnings } from '@gpu/common';
import { describe, expect, it } from 'vitest';
import { loadRegistryConfig, offlineAfterMs, resolveDatabaseUrl } from '../src/config.ts';

const dir = mkdtempSync(join(tmpdir(), 'registry-config-'));

describe('configuration', () => {
  it('has the contract defaults', () => {
    const c = loadRegistryConfig({});
    expect(c.server.port).toBe(8002);
    expect(c.messaging.subjects.status).toBe('registry.providers.status');
    expect(c.heartbeat_interval).toBe('30s');
    expect(offlineAfterMs(c)).toBe(90_000);
    expect(c.access.enabled).toBe(true);
    expect(c.database.embedded_path).toBe('.data/provider-registry/pglite');
    expect(resolveDatabaseUrl(c)).toBe('');
  });

  it('reads the REGISTRY prefix and the plain aliases', () => {
    const c = loadRegistryConfig({
      DATABASE_URL: 'postgres://u@db/x',
      NATS_URL: 'nats://n:4222',
      HEARTBEAT_INTERVAL: '10s',
      REGISTRY__OFFLINE_AFTER: '45s',
      REGISTRY__SERVER__PORT: '9002',
      SERVICE_NAME: 'registry-eu',
    });
    expect(c.database.url).toBe('postgres://u@db/x');
    expect(c.messaging.nats_url).toBe('nats://n:4222');
    expect(offlineAfterMs(c)).toBe(45_000);
    expect(c.server.port).toBe(9002);
    expect(c.registry.registration.service_name).toBe('registry-eu');
    expect(offlineAfterMs(loadRegistryConfig({ HEARTBEAT_INTERVAL: '10s' }))).toBe(30_000);
  });

  it("maps the spec's flat parameters from the file onto the registry section", () => {
    const file = join(dir, 'registry.yaml');
    writeFileSync(
      file,
      [
        'port: ":8100"',
        'consul_address: consul.internal:8500',
        'service_name: provider-registry',
        'service_id_prefix: reg',
        'service_tags: [gpu, registry]',
        'health_check_path: /health',
        'health_check_interval: 15s',
        'health_check_timeout: 3s',
      ].join('\n'),
    );
    const c = loadRegistryConfig({ REGISTRY_CONFIG_FILE: file });
    expect(c.server.port).toBe(8100);
    expect(c.registry.address).toBe('consul.internal:8500');
    expect(c.registry.registration).toMatchObject({
      service_name: 'provider-registry',
      id_prefix: 'reg',
      tags: ['gpu', 'registry'],
      health_check_interval: '15s',
      health_check_timeout: '3s',
    });
  });

  it('builds the database URL from the secrets file or from parts', () => {
    const secrets = join(dir, 'secrets.json');
    writeFileSync(secrets, JSON.stringify({ database: { host: 'pg.internal', user: 'reg', password: 'p@ss/word' } }));
    const fromSecrets = resolveDatabaseUrl(loadRegistryConfig({ SECRETS_FILE_PATH: secrets }));
    expect(fromSecrets).toBe('postgres://reg:p%40ss%2Fword@pg.internal:5432/provider_registry');
    const fromEnv = resolveDatabaseUrl(
      loadRegistryConfig({ DB_HOST: 'h', DB_PORT: '6543', DB_NAME: 'n', DB_USER: 'u' }),
    );
    expect(fromEnv).toBe('postgres://u@h:6543/n');
    writeFileSync(secrets, JSON.stringify({ database_url: 'postgres://s@x/y' }));
    expect(resolveDatabaseUrl(loadRegistryConfig({ SECRETS_FILE_PATH: secrets, DB_HOST: 'h' }))).toBe(
      'postgres://s@x/y',
    );
  });

  it('reads the names of the last release (database_url, nats_url, events.*) with a warning each', () => {
    const file = join(dir, 'old-names.yaml');
    writeFileSync(
      file,
      [
        'database_url: postgres://old@db/x',
        'nats_url: nats://old:4222',
        'events:',
        '  status_subject: old.status',
        '  stream: OLD',
      ].join('\n'),
    );
    const c = loadRegistryConfig({ REGISTRY_CONFIG_FILE: file });
    expect(c.database.url).toBe('postgres://old@db/x');
    expect(c.messaging).toMatchObject({
      nats_url: 'nats://old:4222',
      stream: 'OLD',
      subjects: { status: 'old.status', billing_events: 'billing.events' },
      session_consumer: 'provider-registry-sessions',
    });
    expect(configWarnings(c)).toHaveLength(4);
    expect(configWarnings(c).join('\n')).toContain('events.status_subject');
    const env = loadRegistryConfig({ REGISTRY__EVENTS__STREAM: 'ENV', REGISTRY__DATABASE_URL: 'postgres://e@db/y' });
    expect([env.messaging.stream, env.database.url]).toEqual(['ENV', 'postgres://e@db/y']);
    expect(configWarnings(env)).toHaveLength(2);
    expect(configWarnings(loadRegistryConfig({ DATABASE_URL: 'postgres://u@db/x', NATS_URL: 'nats://n' }))).toEqual([]);
  });

  it('fails clearly on bad values', () => {
    expect(() => loadRegistryConfig({ HEARTBEAT_INTERVAL: '10' })).toThrow(/heartbeat_interval/);
    expect(() => loadRegistryConfig({ OFFLINE_AFTER: 'soon' })).toThrow(/offline_after/);
    expect(() => resolveDatabaseUrl(loadRegistryConfig({ SECRETS_FILE_PATH: join(dir, 'missing.json') }))).toThrow(
      /secrets file/,
    );
  });

  it('trusts a heartbeat subject only with NATS credentials (a server in operator mode)', () => {
    const identity = { NATS_URL: 'nats://n:4222', REGISTRY__MESSAGING__SUBJECT_IDENTITY: 'true' };
    expect(() => loadRegistryConfig(identity)).toThrow(/subject_identity.*nats_credentials/s);
    expect(loadRegistryConfig({ ...identity, NATS_CREDENTIALS: '/run/nats/registry.creds' }).messaging).toMatchObject({
      subject_identity: true,
      nats_credentials: '/run/nats/registry.creds',
    });
  });
});
