/**
 * The object catalog (issue #41): listings, usage and metering read the service's database instead of one store
 * request per object. Writes through the service reach it in the same request; objects written or deleted straight
 * at the S3 server (presigned PUTs, other tools) reach it by reconciliation. Against the real S3 server and a real
 * PostgreSQL database.
 */
import { DeleteObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { lockWaiters } from '@gpu/common/testing';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openTestCatalog, startService, storeClient, type TestService, uniqueBucket } from './helpers.ts';

let svc: TestService;
const s3 = storeClient();

beforeAll(async () => {
  svc = await startService();
});
afterAll(() => svc?.close());

const list = async (bucket: string, query = '') => {
  const res = await svc.app.inject({ method: 'GET', url: `/objects/${bucket}/list${query}` });
  expect(res.statusCode, res.body).toBe(200);
  return res;
};
const entries = async (bucket: string, query = '') =>
  (await list(bucket, query)).json() as Array<{ key: string; size: number; content_type: string | null }>;

/** Puts objects straight at the S3 server, behind the service's back, 16 at a time. */
async function putBehindTheBack(bucket: string, keys: string[], contentType: (key: string) => string) {
  let next = 0;
  const worker = async () => {
    while (next < keys.length) {
      const key = keys[next++]!;
      await s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: key, ContentType: contentType(key) }));
    }
  };
  await Promise.all(Array.from({ length: 16 }, worker));
}

describe('the object catalog', () => {
  it('lists more than 1000 objects with their content types from the catalog, no store request per object', async () => {
    const bucket = uniqueBucket('many');
    await svc.store.ensureBucket(bucket);
    const keys = Array.from({ length: 1100 }, (_, i) => `obj/${String(i).padStart(5, '0')}.${i % 2 ? 'json' : 'txt'}`);
    const typeOf = (key: string) => (key.endsWith('.json') ? 'application/json' : 'text/x-custom');
    await putBehindTheBack(bucket, keys, typeOf);
    await svc.app.reconciler.reconcileBucket(bucket);

    const head = svc.store.head.bind(svc.store);
    let heads = 0;
    svc.store.head = (...args) => {
      heads++;
      return head(...args);
    };
    try {
      const first = await list(bucket, '?limit=1000');
      const page1 = first.json() as Array<{ key: string; content_type: string }>;
      const page2 = await entries(bucket, `?limit=1000&cursor=${first.headers['x-next-cursor']}`);
      const all = [...page1, ...page2];
      expect(all.map((e) => e.key)).toEqual(keys);
      expect(all.every((e) => e.content_type === typeOf(e.key))).toBe(true);
      expect(heads).toBe(0);
    } finally {
      svc.store.head = head;
    }
  });

  it('shows an upload and a delete through the service in the very next listing', async () => {
    const bucket = uniqueBucket('now');
    await svc.app.inject({ method: 'POST', url: `/buckets/${bucket}` });
    const put = await svc.app.inject({
      method: 'PUT',
      url: `/objects/${bucket}/a/b.csv`,
      payload: 'x,y',
      headers: { 'content-type': 'text/csv' },
    });
    expect(put.statusCode).toBe(201);
    expect(await entries(bucket)).toMatchObject([{ key: 'a/b.csv', size: 3, content_type: 'text/csv' }]);
    expect(await entries(bucket, '?recursive=false')).toMatchObject([{ key: 'a/', content_type: null }]);
    expect((await svc.app.inject({ method: 'DELETE', url: `/objects/${bucket}/a/b.csv` })).statusCode).toBe(204);
    expect(await entries(bucket)).toEqual([]);
  });

  it('keeps no row for an object deleted while its upload was being catalogued, and none missing for a newer one', async () => {
    const bucket = uniqueBucket('race');
    await svc.app.inject({ method: 'POST', url: `/buckets/${bucket}` });
    const { database } = await openTestCatalog();
    try {
      // The key's lock held here: the upload, stored, waits to catalogue it; the delete waits to delete it. Let go,
      // they go in turn: the upload's row, then the delete of the object and of its row.
      let put: Promise<{ statusCode: number }> | undefined;
      let deleted: Promise<{ statusCode: number }> | undefined;
      await database.db.transaction().execute(async (trx) => {
        const holder = (await sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`.execute(trx)).rows[0]!.pid;
        await sql`SELECT pg_advisory_xact_lock(hashtextextended(${`catalog:${bucket}/k.bin`}, 0))`.execute(trx);
        put = svc.app.inject({ method: 'PUT', url: `/objects/${bucket}/k.bin`, payload: 'abc' });
        await lockWaiters(database.db, 1, { blockedBy: holder });
        deleted = svc.app.inject({ method: 'DELETE', url: `/objects/${bucket}/k.bin` });
        await lockWaiters(database.db, 2, { blockedBy: holder });
      });
      expect((await put!).statusCode).toBe(201);
      expect((await deleted!).statusCode).toBe(204);
      expect((await svc.app.inject({ method: 'GET', url: `/objects/${bucket}/k.bin` })).statusCode).toBe(404);
      expect(await entries(bucket)).toEqual([]);

      // A row that claims a later Last-Modified than the store's latest (S3 dates a multipart object at its upload's
      // start, so a smaller PUT in between is "newer"): the upload's row, read under the key's lock, replaces it.
      await svc.catalog.put([
        { bucket, key: 'k.bin', size: 1, etag: '"stale"', lastModified: new Date(Date.now() + 3_600_000) },
      ]);
      expect(
        (await svc.app.inject({ method: 'PUT', url: `/objects/${bucket}/k.bin`, payload: 'abcdef' })).statusCode,
      ).toBe(201);
      expect(await entries(bucket)).toMatchObject([{ key: 'k.bin', size: 6 }]);
    } finally {
      await database.close();
    }
  });

  it('takes in objects put and deleted behind its back when it reconciles', async () => {
    const bucket = uniqueBucket('behind');
    await svc.app.inject({ method: 'POST', url: `/buckets/${bucket}` });
    await svc.app.inject({ method: 'PUT', url: `/objects/${bucket}/kept.txt`, payload: 'kept' });
    await svc.app.inject({ method: 'PUT', url: `/objects/${bucket}/doomed.txt`, payload: 'doomed' });
    await svc.app.inject({ method: 'PUT', url: `/objects/${bucket}/changed.txt`, payload: 'v1' });
    // Straight at the store: a presigned PUT would do the same.
    await s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'new.bin', Body: 'brand new', ContentType: 'x/new' }));
    await s3.send(new PutObjectCommand({ Bucket: bucket, Key: 'changed.txt', Body: 'v2 longer', ContentType: 'x/v2' }));
    await s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: 'doomed.txt' }));
    // Not seen yet: the catalog is what the service wrote.
    expect((await entries(bucket)).map((e) => e.key)).toEqual(['changed.txt', 'doomed.txt', 'kept.txt']);

    await svc.app.reconciler.run();
    expect(await entries(bucket)).toMatchObject([
      { key: 'changed.txt', size: 9, content_type: 'x/v2' },
      { key: 'kept.txt', size: 4 },
      { key: 'new.bin', size: 9, content_type: 'x/new' },
    ]);
  });

  it('reconciles a bucket made at the store before its first listing', async () => {
    const bucket = uniqueBucket('foreign');
    await svc.store.ensureBucket(bucket);
    await putBehindTheBack(bucket, ['z.txt', 'dir/y.txt'], () => 'text/plain');
    expect(await entries(bucket, '?recursive=false')).toMatchObject([
      { key: 'dir/', content_type: null },
      { key: 'z.txt', content_type: 'text/plain' },
    ]);
  });

  it("keeps the service's records out of listings", async () => {
    const started = await svc.app.inject({ method: 'POST', url: '/uploads', payload: { key: 'big/file.bin' } });
    expect(started.statusCode).toBe(201);
    const records = svc.config.object_store.owners_bucket;
    await svc.app.reconciler.run();
    expect(await entries(records)).toEqual([]);
    expect((await entries(svc.config.object_store.default_bucket)).some((e) => e.key.startsWith('.'))).toBe(false);
  });

  it("counts each owner's bytes, behind-the-back objects once reconciled (metering reads this)", async () => {
    const alice = await svc.issuer.user(['renter']);
    const folder = `users/${alice.id}/`;
    const put = await svc.app.inject({
      method: 'PUT',
      url: '/objects/notes.txt',
      headers: alice.headers,
      payload: Buffer.alloc(300),
    });
    expect(put.statusCode).toBe(201);
    expect((await svc.catalog.usageByOwner()).get(alice.id)).toBe(300);
    await s3.send(
      new PutObjectCommand({
        Bucket: svc.config.object_store.default_bucket,
        Key: `${folder}direct.bin`,
        Body: Buffer.alloc(700),
      }),
    );
    await svc.app.reconciler.run();
    expect((await svc.catalog.usageByOwner()).get(alice.id)).toBe(1000);
  });

  it('lets one instance reconcile a period', async () => {
    const { database, catalog } = await openTestCatalog();
    try {
      const period = new Date(Date.UTC(2031, 0, 1, 10, 15));
      const claims = await Promise.all([catalog.claimPeriod(period, 'a'), catalog.claimPeriod(period, 'b')]);
      expect(claims.filter(Boolean)).toHaveLength(1);
      expect(await catalog.claimPeriod(period, 'c')).toBe(false);
    } finally {
      await database.close();
    }
  });
});
