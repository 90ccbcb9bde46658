/** Configuration names: snake_case everywhere; the spec's camelCase names still read, with a warning. */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { configWarnings } from '@gpu/common';
import { describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { loadStorageConfig } from '../src/config.ts';

const dir = mkdtempSync(path.join(tmpdir(), 'storage-config-'));

describe('storage configuration', () => {
  it('reads the camelCase names of the spec from the file, warning about each', () => {
    const file = path.join(dir, 'camel.yaml');
    writeFileSync(
      file,
      YAML.stringify({
        object_store: {
          accessKeyID: 'AK',
          secretAccessKey: 'SK',
          useSSL: true,
          defaultBucket: 'camel-bucket',
          autoCreateDefaultBucket: false,
          publicEndpoint: 'https://files.example.com',
          maxUploadSize: 1024,
          partSize: 6 * 1024 * 1024,
          queueSize: 3,
          transferTimeout: '1h',
          connectTimeout: '5s',
        },
      }),
    );
    const config = loadStorageConfig({ STORAGE_CONFIG_FILE: file });
    expect(config.object_store).toMatchObject({
      access_key_id: 'AK',
      secret_access_key: 'SK',
      use_ssl: true,
      default_bucket: 'camel-bucket',
      auto_create_default_bucket: false,
      public_endpoint: 'https://files.example.com',
      max_upload_size: 1024,
      part_size: 6 * 1024 * 1024,
      queue_size: 3,
      transfer_timeout: '1h',
      connect_timeout: '5s',
    });
    const warnings = configWarnings(config);
    expect(warnings).toHaveLength(11);
    expect(warnings[0]).toContain('object_store.accessKeyID');
    expect(warnings[0]).toContain('use object_store.access_key_id');
  });

  it('writes its default file in the snake_case names, and reads it back without warnings', () => {
    const file = path.join(dir, 'defaults', 'config.yaml');
    const config = loadStorageConfig({ STORAGE_CONFIG_FILE: file });
    const written = YAML.parse(readFileSync(file, 'utf8'));
    expect(Object.keys(written.object_store)).toEqual(Object.keys(config.object_store));
    expect(Object.keys(written.object_store)).toContain('access_key_id');
    expect(configWarnings(loadStorageConfig({ STORAGE_CONFIG_FILE: file }))).toEqual([]);
  });

  it('keeps the S3_* aliases', () => {
    const config = loadStorageConfig({
      STORAGE_CONFIG_FILE: path.join(dir, 'aliases.yaml'),
      S3_ACCESS_KEY_ID: 'A',
      S3_SECRET_ACCESS_KEY: 'S',
      S3_USE_SSL: 'true',
      S3_DEFAULT_BUCKET: 'alias-bucket',
      S3_PUBLIC_ENDPOINT: 'https://p.example.com',
    });
    expect(config.object_store).toMatchObject({
      access_key_id: 'A',
      secret_access_key: 'S',
      use_ssl: true,
      default_bucket: 'alias-bucket',
      public_endpoint: 'https://p.example.com',
    });
    expect(configWarnings(config)).toEqual([]);
  });

  it("has the object catalog's database (embedded by default) and its reconciliation interval and pages", () => {
    const defaults = loadStorageConfig({ STORAGE_CONFIG_FILE: path.join(dir, 'catalog-defaults.yaml') });
    expect(defaults.database).toMatchObject({
      url: '',
      embedded_path: '.data/storage/pglite',
      embedded_template_dir: '',
      pool_size: 10,
      connect_timeout: '5s',
    });
    expect(defaults.object_store.reconcile_interval).toBe('15m');
    expect(defaults.object_store.reconcile_pages).toBe(100);
    const set = loadStorageConfig({
      STORAGE_CONFIG_FILE: path.join(dir, 'catalog-set.yaml'),
      DATABASE_URL: 'postgres://u:p@db:5432/storage',
      DATABASE_POOL_SIZE: '4',
      STORAGE__DATABASE__EMBEDDED_PATH: '/var/lib/storage/pglite',
      STORAGE__OBJECT_STORE__RECONCILE_INTERVAL: '0s',
      STORAGE__OBJECT_STORE__RECONCILE_PAGES: '3',
    });
    expect(set.database).toMatchObject({
      url: 'postgres://u:p@db:5432/storage',
      pool_size: 4,
      embedded_path: '/var/lib/storage/pglite',
    });
    expect(set.object_store.reconcile_interval).toBe('0s');
    expect(set.object_store.reconcile_pages).toBe(3);
    expect(() =>
      loadStorageConfig({
        STORAGE_CONFIG_FILE: path.join(dir, 'catalog-bad.yaml'),
        STORAGE__OBJECT_STORE__RECONCILE_INTERVAL: 'often',
      }),
    ).toThrow(/reconcile_interval/);
  });
});
