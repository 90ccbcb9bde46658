/**
 * `pnpm bench storage-listing`: what a listing's content types cost. S3's ListObjectsV2 does not return content
 * types, so the service fetches them with one HEAD per listed object (16 at a time): this lists N objects (default
 * 10,000) through the service with content types (`metadata=true`, the default) and without (`metadata=false`),
 * alternating for a few rounds, next to the store's own listing with the SDK, and writes the medians and the CPU
 * each process spent into the `storage-listing` section of docs/benchmarks.md. Access control is on, as in
 * production (an admin's token on every request).
 * Options: --objects N (default 10000), --rounds N (default 3).
 */
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { CreateBucketCommand, ListObjectsV2Command, PutObjectCommand } from '@aws-sdk/client-s3';
import { PAGE_LIMIT } from '@gpu/common';
import { startTestIssuer, testEnv } from '@gpu/common/testing';
import { machineLine, writeBenchSection } from '../../../scripts/lib/bench-report.ts';
import { directS3Client } from './s3-client.ts';
import { cpuSeconds, startHttpProcess, storePid } from './service-process.ts';

const { values } = parseArgs({
  options: { objects: { type: 'string', default: '10000' }, rounds: { type: 'string', default: '3' } },
});
const OBJECTS = Number(values.objects);
const ROUNDS = Number(values.rounds);
const BUCKET = `bench-list-${Date.now()}`;
const TYPES = ['text/plain', 'application/json', 'text/csv', 'application/octet-stream'];

const issuer = await startTestIssuer({ expiresInSeconds: 24 * 3600 });
const admin = await issuer.user(['admin']);
const s3 = directS3Client();

/** Runs `work` over 0..count-1, `width` at a time. */
async function pooled(count: number, width: number, work: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < count) await work(next++);
  };
  await Promise.all(Array.from({ length: width }, worker));
}

interface Measured {
  ms: number;
  service: number;
  store: number;
}

async function measure(servicePid: number, fn: () => Promise<void>): Promise<Measured> {
  const before = { service: cpuSeconds(servicePid), store: cpuSeconds(storePid()) };
  const t0 = performance.now();
  await fn();
  return {
    ms: performance.now() - t0,
    service: cpuSeconds(servicePid) - before.service,
    store: cpuSeconds(storePid()) - before.store,
  };
}

async function main() {
  await s3.send(new CreateBucketCommand({ Bucket: BUCKET }));
  console.log(`storing ${OBJECTS} objects ...`);
  // Ten folders of small objects, as a job's artifacts would be.
  await pooled(OBJECTS, 32, async (i) => {
    await s3.send(
      new PutObjectCommand({
        Bucket: BUCKET,
        Key: `run-${i % 10}/part-${String(i).padStart(6, '0')}`,
        Body: `object ${i}`,
        ContentType: TYPES[i % TYPES.length],
      }),
    );
  });
  const dir = await mkdtemp(path.join(tmpdir(), 'storage-bench-'));
  const { child, url } = await startHttpProcess('src/server.ts', {
    STORAGE_CONFIG_FILE: path.join(dir, 'config.yaml'),
    HOST: '127.0.0.1',
    LOG_LEVEL: 'warn',
    S3_ENDPOINT: testEnv.s3Endpoint,
    S3_DEFAULT_BUCKET: BUCKET,
    // A listing is bounded by request_timeout (30 s by default), which 100,000 objects with content types outlast
    // (about 1 ms per object here): raised so that the benchmark measures their cost rather than the bound.
    REQUEST_TIMEOUT: '10m',
    AUTH_JWKS_URL: issuer.jwksUrl,
    AUTH_ISSUER: issuer.issuer,
    AUTH_AUDIENCE: issuer.audience,
  });
  const pid = child.pid ?? 0;
  // Every object, page after page of the largest size a list takes (the platform's paging contract).
  const listThroughService = (metadata: boolean) => async () => {
    const entries: Array<{ content_type: string | null }> = [];
    let cursor: string | null = null;
    do {
      const page: string = `${url}/objects/${BUCKET}/list?limit=${PAGE_LIMIT.max}&metadata=${metadata}`;
      const res = await fetch(cursor ? `${page}&cursor=${cursor}` : page, { headers: admin.headers });
      if (res.status !== 200) throw new Error(`listing: ${res.status} ${await res.text()}`);
      entries.push(...((await res.json()) as Array<{ content_type: string | null }>));
      cursor = res.headers.get('x-next-cursor');
    } while (cursor);
    if (entries.length !== OBJECTS) throw new Error(`listing: ${entries.length} entries, ${OBJECTS} expected`);
    if (entries.some((e) => (e.content_type === null) === metadata)) throw new Error('listing: content types wrong');
  };
  const listDirect = async () => {
    let token: string | undefined;
    let count = 0;
    do {
      const page = await s3.send(new ListObjectsV2Command({ Bucket: BUCKET, ContinuationToken: token }));
      count += page.KeyCount ?? 0;
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token);
    if (count !== OBJECTS) throw new Error(`direct listing: ${count} keys`);
  };
  const kinds = { direct: listDirect, keys: listThroughService(false), types: listThroughService(true) };
  const runs: Record<keyof typeof kinds, Measured[]> = { direct: [], keys: [], types: [] };
  for (let round = 0; round < ROUNDS; round++) {
    console.log(`listings, round ${round + 1} of ${ROUNDS} ...`);
    for (const [kind, fn] of Object.entries(kinds) as Array<[keyof typeof kinds, () => Promise<void>]>) {
      runs[kind].push(await measure(kind === 'direct' ? 0 : pid, fn));
    }
  }
  child.kill('SIGTERM');
  s3.destroy();
  await issuer.close();

  const median = (xs: Measured[]) => [...xs].sort((a, b) => a.ms - b.ms)[xs.length >> 1]!;
  const mean = (xs: Measured[], f: (m: Measured) => number) => xs.reduce((a, m) => a + f(m), 0) / xs.length;
  const row = (what: string, kind: keyof typeof kinds) => {
    const m = median(runs[kind]);
    const cpu = (f: (m: Measured) => number) => `${mean(runs[kind], f).toFixed(2)} s`;
    const perObject = ((m.ms * 1000) / OBJECTS).toFixed(0);
    return `| ${what} | ${(m.ms / 1000).toFixed(2)} s | ${perObject} µs | ${kind === 'direct' ? '–' : cpu((x) => x.service)} | ${cpu((x) => x.store)} |`;
  };
  const extra = median(runs.types).ms - median(runs.keys).ms;
  const md = `## storage-listing

\`pnpm bench storage-listing\` — ${machineLine()}

What content types cost in a listing of ${OBJECTS.toLocaleString('en-US')} objects (ten folders of small objects, one
page: \`limit=${OBJECTS}\`). S3's ListObjectsV2 returns no content types, so the service fetches each listed object's
with a HEAD request to the store, 16 at a time (\`metadata=true\`, the default); \`metadata=false\` skips them. Medians
of ${ROUNDS} alternating rounds; CPU seconds per listing, mean over the rounds. Access control is on (an admin's
token on every request). Target: none set; the issue asks for the cost.

| listing | time (median) | per object | service CPU | s3rver CPU |
|---|---|---|---|---|
${row('the store directly (SDK, pages of 1,000)', 'direct')}
${row('through the service, `metadata=false` (keys only)', 'keys')}
${row('through the service, content types (default)', 'types')}

Content types added ${(extra / 1000).toFixed(2)} s to the listing, ${((extra * 1000) / OBJECTS).toFixed(0)} µs per
object, for ${OBJECTS.toLocaleString('en-US')} HEAD requests (the CPU columns say which process did the work). A
client that needs only keys and sizes passes \`metadata=false\`.
`;
  writeBenchSection('storage-listing', md);
}

await main();
