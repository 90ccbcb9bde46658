import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ConsulRecorder, freePort, spawnServer, testEnv, waitForHttp } from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { testCatalogUrl, testIdentities, uniqueBucket } from './helpers.ts';

const serviceDir = fileURLToPath(new URL('..', import.meta.url));

let auth: Record<string, string>;
let jwksUrl: string;

let databaseUrl: string;

// The object catalog's database: this file's on the test PostgreSQL server (else an embedded one under the cwd).
const start = (env: Record<string, string>) =>
  spawnServer('src/server.ts', {
    cwd: serviceDir,
    env: { ...process.env, AUTH_JWKS_URL: jwksUrl, DATABASE_URL: databaseUrl, ...env },
  });

let consul: ConsulRecorder;
let consulAddress: string;
let dir: string;

beforeAll(async () => {
  const { issuer, admin } = await testIdentities();
  jwksUrl = issuer.jwksUrl;
  auth = admin.headers;
  consul = new ConsulRecorder();
  consulAddress = await consul.start();
  dir = await mkdtemp(path.join(tmpdir(), 'storage-server-'));
  databaseUrl = await testCatalogUrl();
});
afterAll(() => consul.close());

describe('storage server process', () => {
  it('writes a default config file, creates the default bucket, registers, and deregisters on SIGTERM', async () => {
    const port = await freePort();
    const configFile = path.join(dir, 'nested', 'storage.yaml');
    const bucket = uniqueBucket('boot');
    const proc = start({
      STORAGE_CONFIG_FILE: configFile,
      PORT: String(port),
      S3_ENDPOINT: testEnv.s3Endpoint,
      S3_DEFAULT_BUCKET: bucket,
      CONSUL_ENABLED: 'true',
      CONSUL_ADDRESS: consulAddress,
      STORAGE__REGISTRY__REGISTRATION__TAGS: 'storage,v1',
    });
    const health = await waitForHttp(`http://127.0.0.1:${port}/health`, proc);
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({ status: 'UP' });

    // The default file holds the defaults (not the environment's overrides).
    expect(existsSync(configFile)).toBe(true);
    const written = YAML.parse(readFileSync(configFile, 'utf8'));
    expect(written.server.port).toBe(8001);
    expect(written.object_store).toMatchObject({ default_bucket: 'platform-data', auto_create_default_bucket: true });

    // The default bucket was ensured at start-up.
    const put = await fetch(`http://127.0.0.1:${port}/objects/boot.txt`, {
      method: 'PUT',
      body: 'booted',
      headers: auth,
    });
    expect(put.status).toBe(201);

    const registration = consul.calls.find((c) => c.path === '/v1/agent/service/register');
    expect(registration?.body).toMatchObject({
      Name: 'storage-service',
      Port: port,
      Address: '127.0.0.1',
      Tags: ['storage', 'v1'],
      Check: { HTTP: `http://127.0.0.1:${port}/health/ready`, Interval: '10s', Timeout: '5s' },
    });
    const id = (registration?.body as { ID?: string } | undefined)?.ID ?? '';
    expect(id).toMatch(/^storage-service-[0-9a-f-]{36}$/);

    proc.child.kill('SIGTERM');
    expect((await proc.exited).code).toBe(0);
    expect(consul.calls.some((c) => c.path === `/v1/agent/service/deregister/${id}`)).toBe(true);
    expect(consul.services.has(id)).toBe(false);
  });

  it('reads an existing config file, with the environment overriding it', async () => {
    const port = await freePort();
    const configFile = path.join(dir, 'custom.yaml');
    const fs = await import('node:fs/promises');
    await fs.writeFile(
      configFile,
      YAML.stringify({ server: { port: 1 }, object_store: { endpoint: testEnv.s3Endpoint, defaultBucket: '' } }),
    );
    const proc = start({ STORAGE_CONFIG_FILE: configFile, STORAGE__SERVER__PORT: String(port) });
    const health = await waitForHttp(`http://127.0.0.1:${port}/health`, proc);
    expect(health.status).toBe(200);
    const noDefault = await fetch(`http://127.0.0.1:${port}/objects/x.txt`, { headers: auth });
    expect(noDefault.status).toBe(404);
    expect(((await noDefault.json()) as { code: string }).code).toBe('DEFAULT_BUCKET_NOT_CONFIGURED');
    proc.child.kill('SIGINT');
    expect((await proc.exited).code).toBe(0);
  });

  it('refuses to start on invalid configuration, naming the key and where it came from', async () => {
    const proc = start({
      STORAGE_CONFIG_FILE: path.join(dir, 'bad.yaml'),
      STORAGE__SERVER__PORT: 'eighty',
      STORAGE__OBJECT_STORE__USE_SSL: 'perhaps',
    });
    expect((await proc.exited).code).toBe(1);
    expect(proc.output()).toContain('server.port');
    expect(proc.output()).toContain('STORAGE__SERVER__PORT');
    expect(proc.output()).toContain('object_store.use_ssl');
  });

  it('refuses a default bucket that breaks the bucket naming rules, naming the key', async () => {
    const proc = start({
      STORAGE_CONFIG_FILE: path.join(dir, 'bad-bucket.yaml'),
      PORT: String(await freePort()),
      S3_ENDPOINT: testEnv.s3Endpoint,
      S3_DEFAULT_BUCKET: 'Bad_Bucket',
    });
    expect((await proc.exited).code).toBe(1);
    expect(proc.output()).toContain('object_store.default_bucket');
    expect(proc.output()).toContain('S3_DEFAULT_BUCKET');
    expect(proc.output()).toContain('lowercase letters');
  });

  it('exits with a clear error when the object store stays unreachable', async () => {
    const proc = start({
      STORAGE_CONFIG_FILE: path.join(dir, 'unreachable.yaml'),
      PORT: String(await freePort()),
      S3_ENDPOINT: '127.0.0.1:1',
      STORAGE__OBJECT_STORE__CONNECT_TIMEOUT: '1s',
    });
    expect((await proc.exited).code).toBe(1);
    expect(proc.output()).toContain('object store at 127.0.0.1:1 unreachable');
  });
});
