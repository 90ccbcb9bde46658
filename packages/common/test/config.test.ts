import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { z } from 'zod';
import {
  baseConfigShape,
  baseEnvAliases,
  ConfigError,
  configWarnings,
  loadConfig,
  zBool,
  zDuration,
  zInt,
  zList,
} from '../src/index.ts';

const schema = z.object({
  ...baseConfigShape(9999),
  object_store: z
    .object({
      endpoint: z.string().default('127.0.0.1:9000'),
      defaultBucket: z.string().default('data'),
      useSSL: zBool().default(false),
      tags: zList().default([]),
      timeout: zDuration().default('5s'),
      maxUploadSize: zInt(1).default(1024),
    })
    .prefault({}),
});

const dir = mkdtempSync(path.join(tmpdir(), 'config-test-'));

/** The ConfigError message `load` throws. */
function configError(load: () => unknown): string {
  try {
    load();
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as Error).message;
  }
  throw new Error('expected a ConfigError');
}

describe('loadConfig', () => {
  it('uses the schema defaults and generates an instance ID', () => {
    const config = loadConfig({ schema, envPrefix: 'SVC', env: {} });
    expect(config.server.port).toBe(9999);
    expect(config.request_timeout).toBe('30s');
    expect(config.object_store.defaultBucket).toBe('data');
    expect(config.instance_id).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('writes a default file when asked and the file is absent, then reads it back', () => {
    const file = path.join(dir, 'sub', 'written.yaml');
    loadConfig({ schema, envPrefix: 'SVC', env: {}, file, writeDefaultFile: true });
    const written = YAML.parse(readFileSync(file, 'utf8'));
    expect(written.server.port).toBe(9999);
    expect(written.instance_id).toBe('');
    writeFileSync(file, YAML.stringify({ ...written, server: { ...written.server, port: 7000 } }));
    expect(loadConfig({ schema, envPrefix: 'SVC', env: {}, file }).server.port).toBe(7000);
  });

  it('refuses a named file that does not exist, rather than running on defaults, and writes none', () => {
    const file = path.join(dir, 'no-such-dir', 'mistyped.yaml');
    expect(configError(() => loadConfig({ schema, envPrefix: 'SVC', env: {}, file }))).toBe(
      `configuration file ${file} does not exist`,
    );
    expect(existsSync(file)).toBe(false);
    // No file named is no file read.
    expect(loadConfig({ schema, envPrefix: 'SVC', env: {}, file: '' }).server.port).toBe(9999);
  });

  it('lets the environment override the file, by structured names and by aliases', () => {
    const file = path.join(dir, 'override.yaml');
    writeFileSync(file, 'server:\n  port: 7000\nobject_store:\n  endpoint: file-endpoint:9000\n');
    const config = loadConfig({
      schema,
      envPrefix: 'SVC',
      file,
      aliases: { ...baseEnvAliases, S3_ENDPOINT: 'object_store.endpoint' },
      env: {
        PORT: '7100',
        S3_ENDPOINT: 'env-endpoint:9000',
        SVC__OBJECT_STORE__DEFAULT_BUCKET: 'from-env',
        SVC__OBJECT_STORE__USE_SSL: 'true',
        SVC__OBJECT_STORE__TAGS: 'a, b',
        SVC__SERVER__TRUSTED_PROXIES: '10.0.0.0/8,127.0.0.1',
      },
    });
    expect(config.server.port).toBe(7100);
    expect(config.object_store).toMatchObject({
      endpoint: 'env-endpoint:9000',
      defaultBucket: 'from-env',
      useSSL: true,
      tags: ['a', 'b'],
    });
    expect(config.server.trusted_proxies).toEqual(['10.0.0.0/8', '127.0.0.1']);
  });

  it('names every bad key and where its value came from', () => {
    const file = path.join(dir, 'bad.yaml');
    writeFileSync(file, 'object_store:\n  timeout: forever\n');
    let error: unknown;
    try {
      loadConfig({
        schema,
        envPrefix: 'SVC',
        file,
        env: { SVC__SERVER__PORT: 'eighty', SVC__OBJECT_STORE__USE_SSL: 'maybe' },
      });
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(ConfigError);
    const message = (error as Error).message;
    expect(message).toContain('server.port');
    expect(message).toContain('environment variable SVC__SERVER__PORT');
    expect(message).toContain('object_store.useSSL');
    expect(message).toContain('object_store.timeout');
    expect(message).toContain(`file ${file}`);
  });

  it('refuses a number or duration that would quietly mean something else', () => {
    const refused = (env: Record<string, string>, file?: string) =>
      configError(() => loadConfig({ schema, envPrefix: 'SVC', env, file }));
    // An empty or blank number is no number (it was port 0: any free port; a size of 0), and neither are a boolean,
    // a null or a fraction written in a file.
    expect(refused({ SVC__SERVER__PORT: '' })).toContain('environment variable SVC__SERVER__PORT');
    expect(refused({ SVC__OBJECT_STORE__MAX_UPLOAD_SIZE: ' ' })).toContain('object_store.maxUploadSize');
    expect(refused({ SVC__OBJECT_STORE__MAX_UPLOAD_SIZE: '0x10' })).toContain('object_store.maxUploadSize');
    for (const [i, text] of ['server:\n  port:\n', 'server:\n  port: true\n', 'server:\n  port: 80.5\n'].entries()) {
      const file = path.join(dir, `number-${i}.yaml`);
      writeFileSync(file, text);
      expect(refused({}, file)).toContain('server.port');
    }
    // A zero request timeout turned the timeout off; a zero shutdown timeout exited at once, as a failure.
    expect(refused({ SVC__REQUEST_TIMEOUT: '0s' })).toContain('request_timeout');
    expect(refused({ SVC__SHUTDOWN_TIMEOUT: '0s' })).toContain('shutdown_timeout');
    // Written plainly, they still load.
    const config = loadConfig({
      schema,
      envPrefix: 'SVC',
      env: { SVC__SERVER__PORT: ' 7200 ', SVC__REQUEST_TIMEOUT: '100ms', SVC__SHUTDOWN_TIMEOUT: '1s' },
    });
    expect(config.server.port).toBe(7200);
    expect(config.request_timeout).toBe('100ms');
  });

  it('refuses a file that is not a mapping, or not YAML', () => {
    const list = path.join(dir, 'list.yaml');
    writeFileSync(list, '- a\n- b\n');
    expect(() => loadConfig({ schema, envPrefix: 'SVC', env: {}, file: list })).toThrow(/mapping/);
    const broken = path.join(dir, 'broken.yaml');
    writeFileSync(broken, 'server: [unclosed\n');
    expect(() => loadConfig({ schema, envPrefix: 'SVC', env: {}, file: broken })).toThrow(/cannot read/);
  });

  it('names the environment variable for camelCase keys, by alias and by structured name', () => {
    const message = configError(() =>
      loadConfig({
        schema,
        envPrefix: 'SVC',
        aliases: { S3_USE_SSL: 'object_store.useSSL' },
        env: { S3_USE_SSL: 'maybe', SVC__OBJECT_STORE__MAX_UPLOAD_SIZE: 'abc' },
      }),
    );
    expect(message).toMatch(/object_store\.useSSL: .*\(from environment variable S3_USE_SSL\)/);
    expect(message).toMatch(
      /object_store\.maxUploadSize: .*\(from environment variable SVC__OBJECT_STORE__MAX_UPLOAD_SIZE\)/,
    );
  });

  it('refuses unknown keys in the file and in prefixed variables, naming each and its source', () => {
    const file = path.join(dir, 'typos.yaml');
    writeFileSync(file, 'server:\n  prot: 7000\nobject_stor:\n  endpoint: x\nobject_store:\n  useSSL: true\n');
    const message = configError(() =>
      loadConfig({
        schema,
        envPrefix: 'SVC',
        file,
        aliases: baseEnvAliases,
        env: {
          SVC__SEVER__PORT: '2',
          SVC__OBJECT_STORE__DEFAULT_BUCKETT: 'b',
          SVC__SERVER__PORT: '7001',
          // Other services' variables and look-alike names are not ours to judge.
          STORAGE__SEVER__PORT: '2',
          SVCX__NOPE: '1',
          SVC_CONFIG_FILE: 'x',
          PORT: '7002',
        },
      }),
    );
    expect(message).toContain(`server.prot: unknown key (from file ${file})`);
    expect(message).toContain(`object_stor: unknown key (from file ${file})`);
    expect(message).toContain('sever: unknown key (from environment variable SVC__SEVER__PORT)');
    expect(message).toContain(
      'object_store.default_buckett: unknown key (from environment variable SVC__OBJECT_STORE__DEFAULT_BUCKETT)',
    );
    expect(message).not.toMatch(/STORAGE__|SVCX__|SVC_CONFIG_FILE|useSSL|server\.port/);
  });

  it('accepts keys a preprocessing step maps, records of free keys, and its own default file', () => {
    const flat = z.preprocess(
      (v) => {
        if (typeof v !== 'object' || v === null || !('listen_port' in v)) return v;
        const { listen_port, ...rest } = v as Record<string, unknown>;
        return { ...rest, server: { port: listen_port } };
      },
      z.object({ ...baseConfigShape(9999), rates: z.record(z.string(), z.string()).default({ a: '1' }) }),
    );
    const file = path.join(dir, 'flat.yaml');
    writeFileSync(file, 'listen_port: 7000\nrates:\n  any-name: "2"\n');
    const config = loadConfig({ schema: flat, envPrefix: 'SVC', file, env: { SVC__LISTEN_PORT: '7100' } });
    expect(config.server.port).toBe(7100);
    expect(config.rates).toMatchObject({ 'any-name': '2' });
    expect(() => loadConfig({ schema: flat, envPrefix: 'SVC', env: { SVC__LISTEN_PORTT: '1' } })).toThrow(
      /listen_portt: unknown key/,
    );

    const written = path.join(dir, 'defaults', 'written.yaml');
    loadConfig({ schema, envPrefix: 'SVC', env: {}, file: written, writeDefaultFile: true });
    expect(() => loadConfig({ schema, envPrefix: 'SVC', env: {}, file: written })).not.toThrow();
  });

  it('turns Consul registration on when an agent address is configured, unless disabled explicitly', () => {
    const load = (env: NodeJS.ProcessEnv, file?: string) =>
      loadConfig({ schema, envPrefix: 'SVC', aliases: baseEnvAliases, env, file }).registry;
    expect(load({})).toMatchObject({ enabled: false, address: '127.0.0.1:8500' });
    expect(load({ CONSUL_ADDRESS: 'consul:8500' })).toMatchObject({ enabled: true, address: 'consul:8500' });
    expect(load({ SVC__REGISTRY__ADDRESS: 'consul:8500' }).enabled).toBe(true);
    expect(load({ CONSUL_ADDRESS: 'consul:8500', CONSUL_ENABLED: 'false' }).enabled).toBe(false);
    expect(load({ CONSUL_ENABLED: 'true' })).toMatchObject({ enabled: true, address: '127.0.0.1:8500' });

    const file = path.join(dir, 'consul.yaml');
    writeFileSync(file, 'registry:\n  address: consul.internal:8500\n');
    expect(load({}, file)).toMatchObject({ enabled: true, address: 'consul.internal:8500' });
    writeFileSync(file, 'registry:\n  address: consul.internal:8500\n  enabled: false\n');
    expect(load({}, file).enabled).toBe(false);

    // The default file leaves registration to follow the address.
    const written = path.join(dir, 'consul-defaults', 'written.yaml');
    loadConfig({ schema, envPrefix: 'SVC', env: {}, file: written, writeDefaultFile: true });
    expect(YAML.parse(readFileSync(written, 'utf8')).registry).not.toHaveProperty('enabled');
    expect(load({}, written).enabled).toBe(false);
    expect(load({ CONSUL_ADDRESS: 'consul:8500' }, written).enabled).toBe(true);
  });

  describe('deprecated key names', () => {
    const snake = z.object({
      ...baseConfigShape(9999),
      database: z.object({ url: z.string().default(''), pool_size: zInt(1).default(5) }).prefault({}),
      object_store: z.object({ access_key_id: z.string().default('k'), use_ssl: zBool().default(false) }).prefault({}),
    });
    const renamed = { database_url: 'database.url' };

    it('takes an old path from the file or a prefixed variable, with a warning naming the new one', () => {
      const file = path.join(dir, 'old-names.yaml');
      writeFileSync(file, YAML.stringify({ database_url: 'postgres://file/db', object_store: { accessKeyID: 'AK' } }));
      const config = loadConfig({ schema: snake, envPrefix: 'SVC', env: {}, file, renamed });
      expect(config.database.url).toBe('postgres://file/db');
      expect(config.object_store.access_key_id).toBe('AK');
      expect(configWarnings(config)).toEqual([
        `configuration key database_url (file ${file}) is deprecated: use database.url; the old name goes in a later release`,
        `configuration key object_store.accessKeyID (file ${file}) is deprecated: use object_store.access_key_id; the old name goes in a later release`,
      ]);

      const fromEnv = loadConfig({
        schema: snake,
        envPrefix: 'SVC',
        env: { SVC__DATABASE_URL: 'postgres://env/db' },
        renamed,
      });
      expect(fromEnv.database.url).toBe('postgres://env/db');
      expect(configWarnings(fromEnv)).toEqual([
        'configuration key database_url (environment variable SVC__DATABASE_URL) is deprecated: use database.url; the old name goes in a later release',
      ]);
    });

    it('warns about nothing when the new names are used, and still refuses keys that match nothing', () => {
      const config = loadConfig({
        schema: snake,
        envPrefix: 'SVC',
        env: { SVC__DATABASE__URL: 'postgres://env/db', SVC__OBJECT_STORE__USE_SSL: 'true' },
        renamed,
      });
      expect(config.database.url).toBe('postgres://env/db');
      expect(config.object_store.use_ssl).toBe(true);
      expect(configWarnings(config)).toEqual([]);
      const file = path.join(dir, 'typo.yaml');
      writeFileSync(file, YAML.stringify({ object_store: { acces_key_id: 'AK' } }));
      expect(configError(() => loadConfig({ schema: snake, envPrefix: 'SVC', env: {}, file, renamed }))).toContain(
        'object_store.acces_key_id: unknown key',
      );
    });

    it('moves every key of an old section, leaving no empty section behind', () => {
      const file = path.join(dir, 'old-section.yaml');
      writeFileSync(file, YAML.stringify({ events: { url: 'postgres://old/section', pool_size: 7 } }));
      const config = loadConfig({
        schema: snake,
        envPrefix: 'SVC',
        env: {},
        file,
        renamed: { 'events.url': 'database.url', 'events.pool_size': 'database.pool_size' },
      });
      expect(config.database).toEqual({ url: 'postgres://old/section', pool_size: 7 });
      expect(configWarnings(config)).toHaveLength(2);
    });

    it('lets the new name win when a file has both', () => {
      const file = path.join(dir, 'both-names.yaml');
      writeFileSync(
        file,
        YAML.stringify({ database_url: 'postgres://old/db', database: { url: 'postgres://new/db' } }),
      );
      const config = loadConfig({ schema: snake, envPrefix: 'SVC', env: {}, file, renamed });
      expect(config.database.url).toBe('postgres://new/db');
    });
  });
});
