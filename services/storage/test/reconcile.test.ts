/**
 * Reconciliation no longer lists the whole store each run: a run reads at most `reconcile_pages` listing pages, going
 * on from where the last one stopped, and looks at the keys handed out in write URLs besides, so an object put
 * through a presigned URL shows after the next run wherever the sweep is. Against the real S3 server and a real
 * PostgreSQL database of this file's own (no other file's buckets in its catalog).
 */
import { DeleteObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { createLogger } from '@gpu/common';
import { lockWaiters } from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { S3ObjectStore } from '../src/adapters/object-store.ts';
import { BucketOwners } from '../src/domain/bucket-owners.ts';
import { CatalogedStore, ObjectOwners, Reconciler } from '../src/domain/catalog/index.ts';
import type { StorePageRequest } from '../src/domain/store.ts';
import { openTestCatalog, storeClient, testConfig, uniqueBucket } from './helpers.ts';

const s3 = storeClient();
// Buckets of this test alone: its default bucket, and a records bucket no other file writes owner records into.
const config = testConfig({ owners_bucket: uniqueBucket('records') });
const bucket = config.object_store.default_bucket;
const store = new S3ObjectStore(config.object_store);
let opened: Awaited<ReturnType<typeof openTestCatalog>>;

/** The listing requests of the bucket the reconciler sends, and the keys they read. */
const listed: { requests: number; keys: number } = { requests: 0, keys: 0 };
const listPage = store.listPage.bind(store);
store.listPage = async (req: StorePageRequest) => {
  const page = await listPage(req);
  if (req.bucket === bucket) {
    listed.requests++;
    listed.keys += page.objects.length;
  }
  return page;
};

let reconciler: Reconciler;
let cataloged: CatalogedStore;

/** One scheduled run, and what it listed. */
async function scheduledRun() {
  listed.requests = 0;
  listed.keys = 0;
  const report = await reconciler.scheduledRun();
  return { report, ...listed };
}

/** Every key the catalog holds for the bucket, in order. */
async function catalogued(): Promise<string[]> {
  const keys: string[] = [];
  for (;;) {
    const after = keys.at(-1);
    const page = await opened.catalog.page({ bucket, prefix: '', limit: 1000, ...(after ? { after } : {}) });
    keys.push(...page.map((e) => e.key));
    if (page.length < 1000) return keys;
  }
}

/** Puts objects straight at the S3 server, behind the service's back, 16 at a time. */
async function putBehindTheBack(keys: string[]) {
  let next = 0;
  const worker = async () => {
    while (next < keys.length) {
      const key = keys[next++]!;
      await s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: key }));
    }
  };
  await Promise.all(Array.from({ length: 16 }, worker));
}

beforeAll(async () => {
  opened = await openTestCatalog();
  await store.ensureBucket(bucket);
  const bucketOwners = new BucketOwners(store, config.object_store.owners_bucket);
  const owners = new ObjectOwners(bucketOwners, bucket);
  cataloged = new CatalogedStore(store, opened.catalog, owners, config.object_store.owners_bucket);
  reconciler = new Reconciler({
    store,
    catalog: opened.catalog,
    owners,
    bucketOwners,
    defaultBucket: bucket,
    recordsBucket: config.object_store.owners_bucket,
    instanceId: 'test',
    intervalMs: 0,
    pagesPerRun: 1,
    logger: createLogger({ service: 'storage-test', instanceId: 'test', level: 'warn' }),
  });
});
afterAll(async () => {
  await opened?.database.close();
  store.close();
});

describe('incremental reconciliation', () => {
  // 2,300 objects written into s3rver first: minutes on a busy machine, where the rest of the suite runs beside it.
  it('lists one page a run, goes on where the last stopped, and sees a presigned PUT at once', async () => {
    const keys = Array.from({ length: 2300 }, (_, i) => `obj/${String(i).padStart(5, '0')}`);
    await putBehindTheBack(keys);

    // Each run lists one page of 1,000 keys, never the whole bucket (three pages).
    let run = await scheduledRun();
    expect({ requests: run.requests, keys: run.keys }).toEqual({ requests: 1, keys: 1000 });
    expect(run.report).toMatchObject({ pages: 1, objects: 1000, bucketsFinished: 0 });
    expect(await catalogued()).toEqual(keys.slice(0, 1000));
    run = await scheduledRun();
    expect({ requests: run.requests, keys: run.keys }).toEqual({ requests: 1, keys: 1000 });
    expect(await catalogued()).toEqual(keys.slice(0, 2000));

    // Written through a write URL, before the sweep's position: looked at by the next run all the same.
    const url = await cataloged.presign(bucket, 'aaa/presigned.txt', 'PUT', 600);
    expect((await fetch(url, { method: 'PUT', body: 'through the URL' })).status).toBe(200);
    // And one deleted behind the back, in the part already swept: found when the sweep comes round again.
    await s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: keys[5]! }));

    run = await scheduledRun();
    // The bucket's last page (300 keys); the sweep stops there, at the end of its round.
    expect({ requests: run.requests, keys: run.keys }).toEqual({ requests: 1, keys: 300 });
    expect(run.report).toMatchObject({ expected: 1, pages: 1, objects: 300, bucketsFinished: 1 });
    expect(await catalogued()).toEqual(['aaa/presigned.txt', ...keys]);

    // The next round starts from the bucket's first page again.
    run = await scheduledRun();
    expect({ requests: run.requests, keys: run.keys }).toEqual({ requests: 1, keys: 1000 });
    expect(await catalogued()).toEqual(['aaa/presigned.txt', ...keys.filter((_, i) => i !== 5)]);
  }, 240_000);

  it("forgets an expected write an hour after its URL expired, and never notes the records bucket's", async () => {
    const records = config.object_store.owners_bucket;
    // A URL that expired two hours ago.
    await opened.catalog.expectWrite({ bucket, key: 'old.txt', until: new Date(Date.now() - 7_200_000) });
    await cataloged.presign(records, 'owner-record.json', 'PUT', 600);
    await cataloged.presign(bucket, 'read-only.txt', 'GET', 600);
    expect((await opened.catalog.expectedWrites()).map((w) => w.key)).toEqual(['aaa/presigned.txt', 'old.txt']);
    await scheduledRun();
    expect((await opened.catalog.expectedWrites()).map((w) => w.key)).toEqual(['aaa/presigned.txt']);
  });

  it('leaves no row for an object deleted through the service while a run looks at it', async () => {
    const key = 'noted/deleted-meanwhile.txt';
    const url = await cataloged.presign(bucket, key, 'PUT', 600);
    expect((await fetch(url, { method: 'PUT', body: 'soon gone' })).status).toBe(200);
    // The run's HEAD of the key has its answer (the object is there); its owner deletes it through the service then.
    const head = store.head.bind(store);
    let deleted: Promise<void> | undefined;
    store.head = async (b, k, cond) => {
      const answer = await head(b, k, cond);
      if (k === key && !deleted) {
        deleted = cataloged.delete(bucket, key);
        // The delete goes through, or waits for the run's hold of the key: then the run goes on.
        await Promise.race([deleted, lockWaiters(opened.database.db, 1)]);
      }
      return answer;
    };
    try {
      await scheduledRun();
    } finally {
      store.head = head;
    }
    await deleted;
    // No row for an object that is gone (a row would be listed, and billed, until the sweep came round).
    expect([...(await opened.catalog.lookup(bucket, [key])).keys()]).toEqual([]);
  });

  it("keeps a write URL's note of a key when a copy onto that key is catalogued", async () => {
    const key = 'noted/target.txt';
    await s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'noted/source.txt', Body: 'copied' }));
    // A write URL for the key, then a copy onto it that would be given up later than the URL expires.
    await cataloged.presign(bucket, key, 'PUT', 600);
    await cataloged.copy({
      source: { bucket, key: 'noted/source.txt' },
      destination: { bucket, key },
      until: new Date(Date.now() + 7_200_000),
    });
    // The copy is catalogued, its own note forgotten; the URL's stays, and is looked at every run.
    const notes = (await opened.catalog.expectedWrites()).filter((w) => w.key === key);
    expect(notes).toHaveLength(1);
    expect(notes[0]!.until.getTime()).toBeLessThan(Date.now() + 601_000);
    const url = await cataloged.presign(bucket, key, 'PUT', 600);
    expect((await fetch(url, { method: 'PUT', body: 'through the URL, after the copy' })).status).toBe(200);
    const noted = (await opened.catalog.expectedWrites()).length;
    const { report } = await scheduledRun();
    expect(report.expected).toBe(noted);
    expect((await opened.catalog.page({ bucket, prefix: 'noted/t', limit: 10 })).map((e) => e.size)).toEqual([
      'through the URL, after the copy'.length,
    ]);
  });
});
