/**
 * Stored bytes, measured for billing (issue #28): once per period the storage service adds up what each owner stores
 * (the buckets they made through the platform, their folder of the shared bucket), against the real S3 server, and
 * reports the period that just ended; buckets made outside the platform are billed to nobody, a report billing could
 * not take is sent again at the next period, and every instance agrees which period that is.
 */
import { Readable } from 'node:stream';
import { connectPublisher, createLogger } from '@gpu/common';
import { testEnv } from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { S3ObjectStore } from '../src/adapters/object-store.ts';
import { BucketOwners } from '../src/domain/bucket-owners.ts';
import {
  METERING_MARKERS,
  PeriodClaims,
  periodEndedBy,
  StorageMeter,
  type StorageUsage,
} from '../src/domain/metering.ts';
import { readJson } from '../src/domain/store.ts';
import { startService, type TestService, testConfig, uniqueBucket } from './helpers.ts';

const reports: StorageUsage[] = [];
let failing = false;
let svc: TestService;
// Owner records of this file's own, so no other test's buckets are measured.
const ownersBucket = uniqueBucket('owners');

beforeAll(async () => {
  svc = await startService({
    objectStore: { owners_bucket: ownersBucket },
    settings: { metering: { interval: '1h' } },
    usageSink: {
      async report(usage) {
        if (failing) throw new Error('billing is down');
        reports.push(usage);
      },
    },
  });
});
afterAll(() => svc?.close());

async function put(headers: Record<string, string>, url: string, bytes: number) {
  const res = await svc.app.inject({ method: 'PUT', url, headers, payload: Buffer.alloc(bytes, 7) });
  expect(res.statusCode, res.body).toBe(201);
}

describe('storage metering', () => {
  it("measures each owner's buckets and shared-bucket folder, and reports the period that just ended", async () => {
    const alice = await svc.issuer.user(['renter']);
    const bob = await svc.issuer.user(['provider']);
    const bobsDaemon = await svc.issuer.client('daemon', bob.id);
    const mine = uniqueBucket('alice');
    const theirs = uniqueBucket('bob');
    expect((await svc.app.inject({ method: 'POST', url: `/buckets/${mine}`, headers: alice.headers })).statusCode).toBe(
      201,
    );
    // A daemon's bucket is its owner's.
    const made = await svc.app.inject({ method: 'POST', url: `/buckets/${theirs}`, headers: bobsDaemon.headers });
    expect(made.statusCode).toBe(201);
    await put(alice.headers, `/objects/${mine}/data/a.bin`, 1000);
    await put(alice.headers, `/objects/${mine}/data/deep/b.bin`, 2500);
    await put(alice.headers, '/objects/notes.txt', 300); // her folder of the shared bucket
    await put(bobsDaemon.headers, `/objects/${theirs}/model.bin`, 4096);
    // A bucket made at the store itself has no owner: nobody pays for it.
    const loose = uniqueBucket('loose');
    await svc.store.ensureBucket(loose);
    await put(svc.auth, `/objects/${loose}/x.bin`, 9999);

    const meter = svc.app.meter!;
    const before = Date.now();
    const result = await meter.meter();
    const { start, end } = periodEndedBy(before, 3_600_000);
    expect(result).toEqual({ reported: 2, failed: 0 });
    const byUser = Object.fromEntries(reports.map((r) => [r.userId, r]));
    expect(byUser[alice.id]).toEqual({ userId: alice.id, periodStart: start, periodEnd: end, bytes: 3800 });
    expect(byUser[bob.id]).toMatchObject({ bytes: 4096, periodStart: start });
    expect(end.getTime() % 3_600_000).toBe(0);
    expect(end.getTime()).toBeLessThanOrEqual(before);
  });

  it('counts the parts of open resumable uploads: an object moved into one is billed as much', async () => {
    const carol = await svc.issuer.user(['renter']);
    const as = (req: { method?: string; url: string; payload?: unknown }) =>
      svc.app.inject({ method: 'GET', ...req, headers: carol.headers } as never);
    const kept = await as({ method: 'PUT', url: '/objects/kept.bin', payload: Buffer.alloc(2000, 7) });
    expect(kept.statusCode, kept.body).toBe(201);
    const started = await as({ method: 'POST', url: '/uploads', payload: { key: 'later.bin' } });
    expect(started.statusCode, started.body).toBe(201);
    const id = started.json().upload_id;
    // The store copies the object into the upload's part, and the object goes: its bytes are in the part now.
    const copied = await as({
      method: 'POST',
      url: `/uploads/${id}/parts/1/copy`,
      payload: { source: { key: 'kept.bin' }, source_etag: kept.json().etag },
    });
    expect(copied.statusCode, copied.body).toBe(200);
    expect((await as({ method: 'DELETE', url: '/objects/kept.bin' })).statusCode).toBe(204);
    reports.length = 0;
    await svc.app.meter!.meter();
    expect(reports.find((r) => r.userId === carol.id)).toMatchObject({ bytes: 2000 });
    // Completed, the upload is the object: counted once.
    expect((await as({ method: 'POST', url: `/uploads/${id}/complete`, payload: {} })).statusCode).toBe(201);
    reports.length = 0;
    await svc.app.meter!.meter();
    expect(reports.find((r) => r.userId === carol.id)).toMatchObject({ bytes: 2000 });
  });

  it('keeps a report billing could not take, and sends it again at the next period', async () => {
    const carol = await svc.issuer.user(['renter']);
    await put(carol.headers, '/objects/carol.bin', 512);
    reports.length = 0;
    failing = true;
    const failed = await svc.app.meter!.meter();
    expect(failed.failed).toBeGreaterThan(0);
    expect(reports).toEqual([]);
    failing = false;
    await svc.app.meter!.meter();
    // Carol's period twice: the kept report and this tick's (billing charges a period once).
    expect(reports.filter((r) => r.userId === carol.id).map((r) => r.bytes)).toEqual([512, 512]);
  });

  it('is measured by one instance a period: the others measure nothing, and the markers stay few', async () => {
    const dave = await svc.issuer.user(['renter']);
    await put(dave.headers, '/objects/dave.bin', 2048);
    const owners = new BucketOwners(svc.store, ownersBucket);
    let clock = Date.UTC(2031, 0, 1, 10, 0, 5);
    const instance = (name: string) => {
      const sent: StorageUsage[] = [];
      let listed = 0;
      // What each owner stores, from the service's object catalog; counted to see which instance measured.
      const usage = {
        usageByOwner: () => {
          listed++;
          return svc.catalog.usageByOwner();
        },
      };
      const meter = new StorageMeter({
        usage,
        sink: { report: async (u) => void sent.push(u) },
        intervalMs: 3_600_000,
        logger: createLogger({ service: 'storage', instanceId: 'test', level: 'silent' }),
        claims: new PeriodClaims(svc.store, ownersBucket, name),
        now: () => clock,
      });
      return { meter, sent, listed: () => listed };
    };
    const [a, b] = [instance('a'), instance('b')];
    for (let hour = 0; hour < 4; hour++) {
      const first = hour % 2 === 0 ? a : b;
      const second = first === a ? b : a;
      const before = [a.sent.length, b.sent.length, second.listed()];
      await first.meter.meter();
      await second.meter.meter();
      // The first to come measures and reports; the second reads no usage and reports nothing.
      expect(first.sent.length - (first === a ? before[0]! : before[1]!)).toBeGreaterThan(0);
      expect(second.sent.length).toBe(second === a ? before[0] : before[1]);
      expect(second.listed()).toBe(before[2]);
      clock += 3_600_000;
    }
    expect([...a.sent, ...b.sent].filter((r) => r.userId === dave.id)).toHaveLength(4);
    const markers = await svc.store.listPage({
      bucket: ownersBucket,
      prefix: METERING_MARKERS,
      oneLevel: false,
      maxKeys: 100,
    });
    // (This test's periods: the service's own meter marked today's in the tests above.)
    expect(markers.objects.filter((o) => o.key.startsWith(`${METERING_MARKERS}2031`)).length).toBe(2);
    // The markers are no buckets of anyone's.
    expect((await owners.ownedBuckets()).some((k) => k.startsWith('.metering'))).toBe(false);
  });

  it('claims the first period of a fresh store, its records bucket not made yet, without a word on the console', async () => {
    // pnpm start's terminal shows what the services print that is not a log line: the store's client wrote there that
    // the first marker's write (into a bucket not made yet, then made) was not retried, which is no failure.
    const store = new S3ObjectStore(testConfig().object_store);
    const console = vi.spyOn(globalThis.console, 'warn');
    try {
      const records = uniqueBucket('records');
      const end = new Date(Date.UTC(2031, 5, 1, 10));
      expect(await new PeriodClaims(store, records, 'first').claim(end, 3_600_000)).toBe(true);
      expect(await readJson(store, records, `${METERING_MARKERS}${end.toISOString()}`)).toEqual({
        instance_id: 'first',
      });
      expect(console).not.toHaveBeenCalled();
    } finally {
      console.mockRestore();
      store.close();
    }
  });

  it("keeps the store client's note of a failed streamed upload in the service's log at debug, off the console", async () => {
    const lines: { level: string; msg: string; component?: string; command?: string }[] = [];
    const logger = createLogger({
      service: 'storage',
      instanceId: 'test',
      level: 'debug',
      destination: { write: (line: string) => lines.push(JSON.parse(line)) },
    });
    // The store as the server makes it, with the service's logger.
    const store = new S3ObjectStore(testConfig().object_store, logger);
    const console = vi.spyOn(globalThis.console, 'warn');
    try {
      const upload = store.upload({
        bucket: uniqueBucket('missing'),
        key: 'a.bin',
        body: Readable.from([Buffer.alloc(1000, 1)]),
        contentType: 'application/octet-stream',
        contentLength: 1000,
      });
      await expect(upload).rejects.toMatchObject({ code: 'BUCKET_NOT_FOUND' });
      expect(lines).toContainEqual(
        expect.objectContaining({
          level: 'debug',
          component: 's3-client',
          msg: expect.stringMatching(/non-retryable/),
        }),
      );
      // The failed command itself is the caller's to judge (here: a 404 BUCKET_NOT_FOUND), at debug too.
      expect(lines).toContainEqual(expect.objectContaining({ level: 'debug', command: 'PutObjectCommand' }));
      expect(lines.filter((l) => l.level !== 'debug')).toEqual([]);
      expect(console).not.toHaveBeenCalled();
    } finally {
      console.mockRestore();
      store.close();
    }
  });

  it('says in its metrics whether its NATS connection for the reports is up', async () => {
    const nats = await connectPublisher({
      url: testEnv.natsUrl,
      credentials: testEnv.natsCredentials,
      name: 'storage-metrics-test',
    });
    const svc = await startService({ nats, usageSink: null });
    try {
      const metrics = (await svc.app.inject({ url: '/metrics' })).body;
      expect(metrics).toMatch(/^nats_connected\{[^}]*\} 1$/m);
    } finally {
      await svc.close();
      await nats.close();
    }
  });

  it('agrees on periods from the epoch, whatever the moment', () => {
    const at = Date.UTC(2026, 10, 24, 13, 37, 12);
    expect(periodEndedBy(at, 3_600_000)).toEqual({
      start: new Date(Date.UTC(2026, 10, 24, 12)),
      end: new Date(Date.UTC(2026, 10, 24, 13)),
    });
    expect(periodEndedBy(at, 15 * 60_000).end).toEqual(new Date(Date.UTC(2026, 10, 24, 13, 30)));
  });
});
