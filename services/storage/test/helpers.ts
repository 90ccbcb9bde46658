import { randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { S3Client } from '@aws-sdk/client-s3';
import { createLogger, type Database, type EventPublisher, migrateToLatest, openDatabase } from '@gpu/common';
import {
  type Caller,
  createTestDatabase,
  injectAs,
  startTestIssuer,
  type TestIssuer,
  testEnv,
} from '@gpu/common/testing';
import type { Kysely } from 'kysely';
import { S3ObjectStore } from '../src/adapters/object-store.ts';
import { buildApp, type StorageApp } from '../src/app.ts';
import { type StorageConfig, storageConfigSchema } from '../src/config.ts';
import { migrations } from '../src/db/migrations/index.ts';
import { ObjectRepository } from '../src/db/object-repository.ts';
import type { StorageDB } from '../src/db/schema.ts';
import { uploadStartLock } from '../src/db/upload-start-lock.ts';
import type { UsageSink } from '../src/domain/metering.ts';

/** A plain S3 client of the tests' S3 server (or of `endpoint`), to look at the store behind the service's back. */
export function storeClient(endpoint = testEnv.s3Endpoint): S3Client {
  return new S3Client({
    endpoint: endpoint.includes('://') ? endpoint : `http://${endpoint}`,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: testEnv.s3AccessKey, secretAccessKey: testEnv.s3SecretKey },
  });
}

export function uniqueBucket(prefix = 'test'): string {
  return `${prefix}-${randomBytes(5).toString('hex')}`;
}

/**
 * Configuration pointing at the test run's s3rver, with per-test overrides of the object store section and of
 * top-level settings (`request_timeout`, ...).
 */
export function testConfig(
  objectStore: Partial<StorageConfig['object_store']> = {},
  settings: Record<string, unknown> = {},
  issuer?: TestIssuer,
): StorageConfig {
  return storageConfigSchema.parse({
    log_level: 'warn',
    ...(issuer ? { access: issuer.accessConfig } : {}),
    ...settings,
    object_store: {
      endpoint: testEnv.s3Endpoint,
      access_key_id: testEnv.s3AccessKey,
      secret_access_key: testEnv.s3SecretKey,
      default_bucket: uniqueBucket('default'),
      ...objectStore,
    },
  });
}

let catalogUrl: Promise<string> | undefined;

/**
 * The URL of this test file's database for the object catalog: one fresh PostgreSQL database on the test server,
 * migrated once; every service a file starts uses it (as the instances of one deployment share theirs).
 */
export function testCatalogUrl(): Promise<string> {
  catalogUrl ??= createTestDatabase('storage').then(async ({ url }) => {
    const database = await openDatabase<StorageDB>({ url, poolSize: 1 });
    await migrateToLatest(database.db as Kysely<unknown>, 'storage-service', migrations);
    await database.close();
    return url;
  });
  return catalogUrl;
}

/** A connection pool to this test file's catalog database, and its repository. */
export async function openTestCatalog(): Promise<{ database: Database<StorageDB>; catalog: ObjectRepository }> {
  const database = await openDatabase<StorageDB>({ url: await testCatalogUrl(), poolSize: 4 });
  return { database, catalog: new ObjectRepository(database.db) };
}

let identities: Promise<{ issuer: TestIssuer; admin: Caller }> | undefined;

/**
 * The token issuer every service of a test file trusts, and an admin: the caller of the tests that are not about
 * access (over `inject` by default, and with `svc.auth` headers over HTTP).
 */
export function testIdentities(): Promise<{ issuer: TestIssuer; admin: Caller }> {
  identities ??= startTestIssuer().then(async (issuer) => ({ issuer, admin: await issuer.user(['admin']) }));
  return identities;
}

export interface TestService {
  app: StorageApp;
  issuer: TestIssuer;
  /** The admin's `authorization` header, for requests over HTTP. */
  auth: Record<string, string>;
  config: StorageConfig;
  store: S3ObjectStore;
  /** The object catalog the service reads and writes. */
  catalog: ObjectRepository;
  /** Base URL when started with `listen: true`. */
  url: string;
  close(): Promise<void>;
}

/** Builds the storage app on the real S3 server; ensures the default bucket like server.ts does. */
export async function startService(
  opts: {
    objectStore?: Partial<StorageConfig['object_store']>;
    settings?: Record<string, unknown>;
    listen?: boolean;
    /** Where the meter reports (by default billing as `metering` says: off in the test config; null: nowhere). */
    usageSink?: UsageSink | null;
    /** NATS, as server.ts connects it when configured. */
    nats?: EventPublisher;
    /** Upload starts locked as on an embedded database (`pnpm start`'s PGlite): by the instance's own queue alone. */
    embeddedStartLock?: boolean;
  } = {},
): Promise<TestService> {
  const { issuer, admin } = await testIdentities();
  const config = testConfig(opts.objectStore, opts.settings, issuer);
  const logger = createLogger({ service: 'storage-test', instanceId: 'test', level: 'warn' });
  const store = new S3ObjectStore(config.object_store);
  if (config.object_store.default_bucket) await store.ensureBucket(config.object_store.default_bucket);
  const { database, catalog } = await openTestCatalog();
  const app = await buildApp({
    config,
    logger,
    store,
    catalog,
    startLock: uploadStartLock(database.db, opts.embeddedStartLock ? 'pglite' : database.kind),
    ...(opts.usageSink !== undefined ? { usageSink: opts.usageSink } : {}),
    ...(opts.nats ? { nats: opts.nats } : {}),
  });
  let url = '';
  if (opts.listen) url = await app.listen({ host: '127.0.0.1', port: 0 });
  else await app.ready();
  injectAs(app, admin);
  return {
    app,
    issuer,
    auth: admin.headers,
    config,
    store,
    catalog,
    url,
    close: async () => {
      await app.close();
      store.close();
      await database.close();
    },
  };
}

/** An HTTP request whose path is sent exactly as given (no URL normalisation of dot segments). */
export function rawRequest(
  base: string,
  method: string,
  path: string,
  body?: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: string }> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const req = request({ host: url.hostname, port: url.port, method, path, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }),
      );
    });
    req.on('error', reject);
    req.end(body);
  });
}
