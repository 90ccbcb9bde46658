import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { z } from 'zod';
import { baseConfigShape, baseEnvAliases, ConfigError, loadConfig, zBool, zDuration, zList } from '../src/index.ts';

const schema = z.object({
  ...baseConfigShape(9999),
  object_store: z
    .object({
      endpoint: z.string().default('127.0.0.1:9000'),
      defaultBucket: z.string().default('data'),
      useSSL: zBool().default(false),
      tags: zList().default([]),
      timeout: zDuration().default('5s'),
    })
    .prefault({}),
});

const dir = mkdtempSync(path.join(tmpdir(), 'config-test-'));

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

  it('refuses a file that is not a mapping, or not YAML', () => {
    const list = path.join(dir, 'list.yaml');
    writeFileSync(list, '- a\n- b\n');
    expect(() => loadConfig({ schema, envPrefix: 'SVC', env: {}, file: list })).toThrow(/mapping/);
    const broken = path.join(dir, 'broken.yaml');
    writeFileSync(broken, 'server: [unclosed\n');
    expect(() => loadConfig({ schema, envPrefix: 'SVC', env: {}, file: broken })).toThrow(/cannot read/);
  });
});
