/**
 * `pnpm bench storage-listing`: a listing page with content types, read from the service's object catalog, against
 * the store's own keys-only ListObjectsV2 page, at 1,000 to 1,000,000 objects. For each size, a bucket of that many
 * small objects (a thousand folders of up to a thousand): pages of 1,000 (`limit=1000`, content types on) at the
 * start, the middle and near the end of the bucket, through the service, next to the same pages of the store's
 * ListObjectsV2 (keys, sizes, ETags; no content types) with the SDK. Medians over the rounds; writes the
 * `storage-listing` section of docs/benchmarks.md. Access control is on (an admin's token on every request).
 *
 * Seeding: putting a million objects through s3rver (one HTTP request and three files each) takes far longer than
 * this machine allows, so the objects are seeded as s3rver itself stores them: four template objects are put through
 * the S3 API (one per content type), and each bench object is made of one template's files (object, `.md5`,
 * `metadata.json`; copied once per folder, hard links after) at its key's path; s3rver then lists, HEADs and serves them as objects it stored. The
 * catalog gets the rows reconciliation would write for them (key, size, content type, ETag), inserted with one SQL
 * statement, the bucket marked reconciled. Each page is checked: the service's keys are the store's, with the
 * content types the templates were put with.
 * Options: --sizes 1000,10000,100000,1000000 (default), --rounds N (default 5).
 */
import { copyFileSync, linkSync, mkdirSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { CreateBucketCommand, HeadObjectCommand, ListObjectsV2Command, PutObjectCommand } from '@aws-sdk/client-s3';
import { machineLine, writeBenchSection } from '@gpu/bench-kit';
import { openDatabase } from '@gpu/common';
import { createTestDatabase, startTestIssuer, testEnv } from '@gpu/common/testing';
import { sql } from 'kysely';
import { directS3Client } from './s3-client.ts';
import { startHttpProcess } from './service-process.ts';

const { values } = parseArgs({
  options: {
    sizes: { type: 'string', default: '1000,10000,100000,1000000' },
    rounds: { type: 'string', default: '5' },
  },
});
const SIZES = values.sizes.split(',').map(Number);
const ROUNDS = Number(values.rounds);
const PAGE = 1000;
const TYPES = ['text/plain', 'application/json', 'text/csv', 'application/octet-stream'];
const BODY = 'bench object';
const STORE_DIR = path.resolve(process.env.TEST_ENV_DIR ?? '.test-env', 's3');
const RUN = Date.now();

const issuer = await startTestIssuer({ expiresInSeconds: 24 * 3600 });
const admin = await issuer.user(['admin']);
const s3 = directS3Client();

/** The i-th object's key: folder `i / 1000`, in the order of the keys' bytes. */
const keyOf = (i: number) => `run-${String(Math.floor(i / PAGE)).padStart(4, '0')}/part-${String(i).padStart(7, '0')}`;
/** s3rver's path of a key's file (`<dir>/<bucket>/<folders>/<name>._S3rver_<resource>`). */
const fileOf = (bucket: string, key: string, resource: string) =>
  path.join(STORE_DIR, bucket, `${key}._S3rver_${resource}`);

/** Four objects put through the S3 API, one per content type, whose files every bench object links to. */
async function templates(): Promise<{ bucket: string; etag: string }> {
  const bucket = `bench-templates-${RUN}`;
  await s3.send(new CreateBucketCommand({ Bucket: bucket }));
  for (const [t, type] of TYPES.entries()) {
    await s3.send(new PutObjectCommand({ Bucket: bucket, Key: `t${t}`, Body: BODY, ContentType: type }));
  }
  const head = await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: 't0' }));
  return { bucket, etag: head.ETag ?? '' };
}

const RESOURCES = ['object', 'object.md5', 'metadata.json'];

/**
 * A bucket of `count` objects at the store, as s3rver stores them: in each folder, the first object of each content
 * type is a copy of its template's files and the others hard links to them (a file takes some 65,000 links at most).
 */
async function seedStore(bucket: string, count: number, template: string): Promise<void> {
  await s3.send(new CreateBucketCommand({ Bucket: bucket }));
  for (let i = 0; i < count; i++) {
    const key = keyOf(i);
    const first = i - (i % PAGE);
    if (i === first) mkdirSync(path.dirname(fileOf(bucket, key, 'object')), { recursive: true });
    const copy = i - first < TYPES.length;
    for (const resource of RESOURCES) {
      const target = fileOf(bucket, key, resource);
      if (copy) copyFileSync(fileOf(template, `t${i % TYPES.length}`, resource), target);
      else linkSync(fileOf(bucket, keyOf(first + (i % TYPES.length)), resource), target);
    }
  }
}

async function main() {
  const { bucket: template, etag } = await templates();
  const db = await createTestDatabase('storage_bench');
  const dir = await mkdtemp(path.join(tmpdir(), 'storage-bench-'));
  const { child, url } = await startHttpProcess('src/server.ts', {
    STORAGE_CONFIG_FILE: path.join(dir, 'config.yaml'),
    HOST: '127.0.0.1',
    LOG_LEVEL: 'warn',
    S3_ENDPOINT: testEnv.s3Endpoint,
    S3_DEFAULT_BUCKET: '',
    DATABASE_URL: db.url,
    // The catalog is seeded below as reconciliation would fill it: no run of the service's own during the timings.
    STORAGE__OBJECT_STORE__RECONCILE_INTERVAL: '24h',
    AUTH_JWKS_URL: issuer.jwksUrl,
    AUTH_ISSUER: issuer.issuer,
    AUTH_AUDIENCE: issuer.audience,
  });
  const database = await openDatabase<unknown>({ url: db.url });
  const period = Math.floor(Date.now() / 86_400_000) * 86_400_000;
  await sql`INSERT INTO reconcile_runs (period_start, instance_id) VALUES (${new Date(period)}, 'bench')
            ON CONFLICT DO NOTHING`.execute(database.db);

  const rows: string[] = [];
  for (const size of SIZES) {
    const bucket = `bench-list-${size}-${RUN}`;
    console.log(`seeding ${size.toLocaleString('en-US')} objects ...`);
    await seedStore(bucket, size, template);
    const types = sql.join(TYPES.map((t) => sql`${t}`));
    await sql`INSERT INTO objects (bucket, key, size, content_type, etag, last_modified)
      SELECT ${bucket}, 'run-' || lpad((g / ${PAGE})::text, 4, '0') || '/part-' || lpad(g::text, 7, '0'),
             ${BODY.length}, (ARRAY[${types}])[g % ${TYPES.length} + 1], ${etag}, now()
      FROM generate_series(0, ${size - 1}) AS g`.execute(database.db);
    await sql`INSERT INTO catalog_buckets (name, reconciled_at) VALUES (${bucket}, now())`.execute(database.db);
    await sql`ANALYZE objects`.execute(database.db);

    // Pages at the start, the middle and near the end (after the position's key).
    const positions = [undefined, keyOf(Math.floor(size / 2)), keyOf(Math.max(0, size - PAGE - 1))];
    const storePage = async (after?: string) => {
      const page = await s3.send(new ListObjectsV2Command({ Bucket: bucket, MaxKeys: PAGE, StartAfter: after }));
      return (page.Contents ?? []).map((o) => o.Key ?? '');
    };
    const servicePage = async (after?: string) => {
      const query = `limit=${PAGE}${after ? `&start_after=${encodeURIComponent(after)}` : ''}`;
      const res = await fetch(`${url}/objects/${bucket}/list?${query}`, { headers: admin.headers });
      if (res.status !== 200) throw new Error(`listing: ${res.status} ${await res.text()}`);
      return (await res.json()) as Array<{ key: string; content_type: string | null }>;
    };
    for (const after of positions) {
      const [keys, entries] = [await storePage(after), await servicePage(after)];
      if (entries.map((e) => e.key).join() !== keys.join()) throw new Error(`${bucket}: the pages differ`);
      const start = after === undefined ? 0 : Number(after.slice(-7)) + 1;
      if (entries.some((e, n) => e.content_type !== TYPES[(start + n) % TYPES.length])) {
        throw new Error(`${bucket}: content types wrong`);
      }
    }
    const time = async (fn: (after?: string) => Promise<unknown>) => {
      const runs: number[] = [];
      for (let round = 0; round < ROUNDS; round++) {
        for (const after of positions) {
          const t0 = performance.now();
          await fn(after);
          runs.push(performance.now() - t0);
        }
      }
      return runs.sort((a, b) => a - b)[runs.length >> 1]!;
    };
    // Alternating, so that neither profits from a warmer machine.
    const [store, service] = [await time(storePage), await time(servicePage)];
    const [store2, service2] = [await time(storePage), await time(servicePage)];
    const storeMs = Math.min(store, store2);
    const serviceMs = Math.min(service, service2);
    rows.push(
      `| ${size.toLocaleString('en-US')} | ${storeMs.toFixed(1)} ms | ${serviceMs.toFixed(1)} ms | ` +
        `${(serviceMs / storeMs).toFixed(2)}x |`,
    );
    console.log(rows[rows.length - 1]);
  }
  child.kill('SIGTERM');
  await database.close();
  s3.destroy();
  await issuer.close();

  const md = `## storage-listing

\`pnpm bench storage-listing\` — ${machineLine()}

A listing page of ${PAGE.toLocaleString('en-US')} objects with content types (\`limit=${PAGE}\`, \`metadata=true\`, the
default) through the service, which reads it from its object catalog (PostgreSQL, one range of the primary key), next
to the same page of the store's own ListObjectsV2 with the SDK (keys, sizes, ETags; no content types), in buckets of
${SIZES.map((n) => n.toLocaleString('en-US')).join(', ')} small objects (a thousand per folder) on the test s3rver.
Medians of ${ROUNDS} rounds of three pages (the start, the middle and the end of the bucket), the better of two
alternating passes. Access control is on (an admin's token on every request). Target: at most 1.2x the keys-only
page, never a timeout.

| objects in the bucket | store ListObjectsV2 page (keys only) | service page with content types | ratio |
|---|---|---|---|
${rows.join('\n')}

Seeded as s3rver stores objects (hard links to the files of four objects put through the S3 API: a million PUTs
through s3rver would take hours here), the catalog with the rows reconciliation writes for them (one SQL insert); each
page was checked against the store's (same keys, the templates' content types). Before the catalog, the service
fetched each listed object's content type with a HEAD (about 1 ms an object against s3rver: 1 s a page of 1,000,
and \`503 REQUEST_TIMEOUT\` for a listing past some 30,000 objects).
`;
  writeBenchSection('storage-listing', md);
}

await main();
