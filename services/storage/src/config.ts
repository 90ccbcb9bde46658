/**
 * The storage service's configuration: the shared settings plus the object store section, in snake_case like
 * every service's. The spec's camelCase names (`accessKeyID`, `defaultBucket`, `useSSL`, ...) are still read from
 * the file, with a deprecation warning (the loader takes any camelCase spelling of a snake_case key); environment
 * names ignore case and underscores anyway (`STORAGE__OBJECT_STORE__DEFAULTBUCKET`).
 */
import {
  baseConfigShape,
  baseEnvAliases,
  databaseEnvAliases,
  databaseShape,
  loadConfig,
  machineClientShape,
  messagingEnvAliases,
  messagingShape,
  zBool,
  zDuration,
  zInt,
} from '@gpu/common';

/** The service's port in the platform's table. */
const DEFAULT_PORT = 8001;

import { bucketNameProblem } from '@gpu/common';
import { z } from 'zod';
import { DEFAULT_MAX_KEY_SEGMENT_BYTES } from './domain/key-limits.ts';

const GB = 1024 ** 3;

export const storageConfigSchema = z.object({
  ...baseConfigShape(DEFAULT_PORT),
  object_store: z
    .object({
      /** host:port or URL of the S3-compatible server. */
      endpoint: z.string().min(1).default('127.0.0.1:9000'),
      access_key_id: z.string().default('S3RVER'),
      secret_access_key: z.string().default('S3RVER'),
      use_ssl: zBool().default(false),
      region: z.string().default('us-east-1'),
      /** Bucket of the default-bucket routes; those routes answer 404 when empty. S3's bucket naming rules. */
      default_bucket: z
        .string()
        .refine((name) => name === '' || bucketNameProblem(name) === undefined, {
          error: (issue) => `invalid bucket name: ${bucketNameProblem(String(issue.input))}`,
        })
        .default('platform-data'),
      auto_create_default_bucket: zBool().default(true),
      /** Bucket of the bucket-owner records (one small object per bucket made through the platform). */
      owners_bucket: z
        .string()
        .refine((name) => bucketNameProblem(name) === undefined, {
          error: (issue) => `invalid bucket name: ${bucketNameProblem(String(issue.input))}`,
        })
        .default('platform-bucket-owners'),
      /** Endpoint written into presigned URLs, for clients outside the internal network. */
      public_endpoint: z.string().default(''),
      /** Largest accepted upload: 5 GiB (5,368,709,120 bytes) by default, the spec's 5 GB bound. */
      max_upload_size: zInt(1).default(5 * GB),
      /**
       * The most keys a user may have presigned write URLs open for at once (each costs every reconciliation run a look
       * at the store); another key's is 409 TOO_MANY_WRITE_URLS. Admins and platform services are not counted.
       */
      max_open_write_urls: zInt(1).default(10_000),
      /**
       * The most bytes (UTF-8) of one `/`-separated segment of a key that the store holds (`domain/key-limits.ts`): 233
       * by default, what every store the platform runs on holds (the embedded s3rver, MinIO); S3 has no limit per
       * segment (1024: the key's own limit alone). A longer segment is a 400 before the store is asked.
       */
      max_key_segment_bytes: zInt(1, 1024).default(DEFAULT_MAX_KEY_SEGMENT_BYTES),
      /** Part size of multipart uploads; bodies of known length up to this size go in one PUT. */
      part_size: zInt(5 * 1024 * 1024).default(8 * 1024 * 1024),
      /**
       * Copies (`POST /objects/copy`) are made by the store: a source up to this size in one request, a larger one in
       * parts of this size (UploadPartCopy). 5 GiB by default, the most one S3 copy request takes; 5 MiB to 5 GiB.
       */
      copy_part_size: zInt(5 * 1024 * 1024, 5 * GB).default(5 * GB),
      /**
       * Parts in flight for chunked uploads (no Content-Length), which buffer each part: memory per such
       * upload is about part_size x queue_size. Uploads with a Content-Length stream every part unbuffered. Also the
       * parts a large copy has the store copy at once.
       */
      queue_size: zInt(1, 32).default(2),
      /** Time limit of one upload or download (0 = none); request_timeout bounds the rest. */
      transfer_timeout: zDuration().default('2h'),
      /**
       * How long an upload may wait for the next byte of its body before it is given up (408 CLIENT_TIMEOUT, nothing
       * stored; 0 = no limit but transfer_timeout). Time the service itself holds the body back (the store slower
       * than the client) does not count.
       */
      upload_idle_timeout: zDuration().default('60s'),
      /**
       * How long a resumable upload (`/uploads`) may stay unfinished: after it, the sweeper aborts it and frees its
       * parts (swept every quarter of it, at most hourly).
       */
      upload_expiry: zDuration().default('24h'),
      /** How long start-up waits for the store to answer its connection test. */
      connect_timeout: zDuration().default('30s'),
      /**
       * How often the object catalog is compared with the store (one instance a period), for objects written or
       * deleted behind the service's back (presigned PUTs, other tools): `0s` compares at start-up only.
       */
      reconcile_interval: zDuration().default('15m'),
      /**
       * At most this many listing pages (1,000 keys each) of the store a run of reconciliation reads, going on from
       * where the last one stopped (`0`: no bound, the whole store every run). Keys handed out in write URLs are looked
       * at every run besides.
       */
      reconcile_pages: zInt(0).default(100),
    })
    .prefault({}),
  /**
   * The service's own database, which holds the object catalog (every object's key, size, content type, ETag and
   * owner): `url` (postgres://; empty opens an embedded PGlite database at `embedded_path`), `embedded_template_dir`,
   * `pool_size`, `connect_timeout`.
   */
  database: z.object(databaseShape({ embeddedPath: '.data/storage/pglite' })).prefault({}),
  /**
   * Stored bytes, billed: once per `interval`, the service measures what each owner stores (their buckets, and their
   * folder in the default bucket) and reports the period to billing with its machine client: over NATS when
   * `messaging.nats_url` is set (JetStream, `<messaging.subjects.usage>.<user_id>`), else over HTTP
   * (`POST /api/v1/billing/storage-usage` at `billing_url`). Off with neither, or with `interval: 0s`.
   */
  metering: z
    .object({
      billing_url: z.string().default(''),
      // storage's machine client: `credentials_file` is read when the first report is sent (auth writes it at start).
      ...machineClientShape(),
      /** The period measured and billed; periods start at multiples of it (UTC), so every instance's agree. */
      interval: zDuration().default('1h'),
      /** Time limit of one call to billing (two more attempts follow a failure that may be retried). */
      timeout: zDuration().default('10s'),
    })
    .prefault({}),
  /**
   * NATS, for the usage reports (`metering`): `nats_url` (empty: reports go over HTTP), `stream` (the JetStream stream
   * capturing them, which billing reads too), `subjects.usage` (their prefix: `<prefix>.<user_id>`).
   */
  messaging: z.object(messagingShape({ stream: 'STORAGE_USAGE', subjects: { usage: 'storage.usage' } })).prefault({}),
});

export type StorageConfig = z.infer<typeof storageConfigSchema>;

/** Loads the configuration file (written with defaults, in the current names, when absent), then the environment. */
export function loadStorageConfig(env: NodeJS.ProcessEnv = process.env): StorageConfig {
  return loadConfig({
    schema: storageConfigSchema,
    envPrefix: 'STORAGE',
    file: env.STORAGE_CONFIG_FILE ?? 'config.yaml',
    writeDefaultFile: true,
    env,
    aliases: {
      ...baseEnvAliases,
      ...databaseEnvAliases,
      ...messagingEnvAliases,
      S3_ENDPOINT: 'object_store.endpoint',
      S3_ACCESS_KEY_ID: 'object_store.access_key_id',
      S3_SECRET_ACCESS_KEY: 'object_store.secret_access_key',
      S3_USE_SSL: 'object_store.use_ssl',
      S3_REGION: 'object_store.region',
      S3_DEFAULT_BUCKET: 'object_store.default_bucket',
      S3_PUBLIC_ENDPOINT: 'object_store.public_endpoint',
      BILLING_URL: 'metering.billing_url',
      AUTH_URL: 'metering.auth_url',
      STORAGE_CLIENT_CREDENTIALS_FILE: 'metering.credentials_file',
    },
  });
}
