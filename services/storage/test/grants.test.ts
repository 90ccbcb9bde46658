/**
 * POST /grants: a platform service gets presigned URLs to a user's objects for a workload run for them, each entry
 * checked as that user. What a renter and a provider's daemon would notice: the URLs read and write exactly the
 * objects granted, the user sees what a workload wrote, nothing outside the user's own storage is ever signed.
 */
import { randomBytes } from 'node:crypto';
import type { Caller } from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService, type TestService, uniqueBucket } from './helpers.ts';

let svc: TestService;
let renter: Caller;
let other: Caller;
let service: Caller;
let defaultBucket: string;

beforeAll(async () => {
  svc = await startService();
  defaultBucket = svc.config.object_store.default_bucket;
  renter = await svc.issuer.user(['renter']);
  other = await svc.issuer.user(['renter', 'provider']);
  service = await svc.issuer.client('service');
});
afterAll(() => svc?.close());

const key = (prefix = 'k') => `${prefix}-${randomBytes(4).toString('hex')}.txt`;

/** `POST /grants` as `caller` (a platform service unless told). */
const grant = (body: unknown, caller: Caller = service) =>
  svc.app.inject({ method: 'POST', url: '/grants', payload: body as object, headers: caller.headers });

/** The caller's own upload through the default-bucket route (`/objects/{key}`, in their folder). */
async function upload(caller: Caller, k: string, text: string): Promise<void> {
  const res = await svc.app.inject({
    method: 'PUT',
    url: `/objects/${encodeURIComponent(k)}`,
    payload: Buffer.from(text),
    headers: caller.headers,
  });
  expect(res.statusCode).toBe(201);
}

/** A small object the caller uploaded to their folder (`mine` for the renter, `them` otherwise). */
async function uploaded(caller: Caller): Promise<{ key: string }> {
  const k = key('own');
  await upload(caller, k, caller === renter ? 'mine' : 'them');
  return { key: k };
}

/** A bucket created by `caller` (and so theirs). */
async function bucketOf(caller: Caller): Promise<string> {
  const bucket = uniqueBucket('grant');
  const res = await svc.app.inject({ method: 'POST', url: `/buckets/${bucket}`, headers: caller.headers });
  expect(res.statusCode).toBe(201);
  return bucket;
}

const put = (url: string, text: string) => fetch(url, { method: 'PUT', body: text });

describe('POST /grants', () => {
  it("gives a service a read URL that downloads the renter's object, and a write URL the renter then reads", async () => {
    const input = key('input');
    await upload(renter, input, 'training data');
    const output = `outputs/${key('result')}`;
    const res = await grant({ user_id: renter.id, read: [{ key: input }], write: [{ key: output }] });
    expect(res.statusCode).toBe(200);
    expect(res.headers['cache-control']).toBe('no-store');
    const body = res.json();
    expect(body.read).toEqual([{ bucket: defaultBucket, key: input, url: expect.any(String), size: 13 }]);
    expect(body.write).toEqual([{ bucket: defaultBucket, key: output, url: expect.any(String) }]);

    const download = await fetch(body.read[0].url);
    expect(download.status).toBe(200);
    expect(await download.text()).toBe('training data');

    expect((await put(body.write[0].url, 'the model')).status).toBe(200);
    const read = await svc.app.inject({ url: `/objects/${encodeURIComponent(output)}`, headers: renter.headers });
    expect(read.statusCode).toBe(200);
    expect(read.body).toBe('the model');
  });

  it('signs for 10 minutes by default and up to 1 hour, and says when the URLs expire', async () => {
    const before = Date.now();
    const body = (await grant({ user_id: renter.id, write: [{ key: 'logs/out.txt' }] })).json();
    const after = Date.now();
    expect(body.write[0].url).toContain('X-Amz-Expires=600');
    expect(body.expires_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    // Signed between the two (its time in whole seconds).
    expect(Date.parse(body.expires_at) - before).toBeGreaterThanOrEqual(599_000);
    expect(Date.parse(body.expires_at) - after).toBeLessThanOrEqual(600_000);
    const hour = (await grant({ user_id: renter.id, write: [{ key: 'logs/out.txt' }], expiry: '1h' })).json();
    expect(hour.write[0].url).toContain('X-Amz-Expires=3600');
  });

  it("grants the user's own bucket by its full keys, and the default bucket named with keys in their folder", async () => {
    const bucket = await bucketOf(renter);
    const write = await grant({ user_id: renter.id, write: [{ bucket, key: 'runs/1/out.bin' }] });
    expect(write.statusCode).toBe(200);
    expect((await put(write.json().write[0].url, 'bytes')).status).toBe(200);
    const read = await grant({
      user_id: renter.id,
      read: [
        { bucket, key: 'runs/1/out.bin' },
        { bucket: defaultBucket, key: `users/${renter.id}/${(await uploaded(renter)).key}` },
      ],
    });
    expect(read.statusCode).toBe(200);
    expect(read.json().read.map((r: { key: string; size: number }) => [r.key.split('/')[0], r.size])).toEqual([
      ['runs', 5],
      ['users', 4],
    ]);
    expect(await (await fetch(read.json().read[0].url)).text()).toBe('bytes');
  });

  it('reads an uppercase user ID as the same user (the same folder)', async () => {
    const { key: k } = await uploaded(renter);
    const res = await grant({ user_id: renter.id.toUpperCase(), read: [{ key: k }] });
    expect(res.statusCode).toBe(200);
    expect(await (await fetch(res.json().read[0].url)).text()).toBe('mine');
  });

  it("refuses another user's folder (403 FOLDER_NOT_OWNED) naming the entry, and signs nothing", async () => {
    const { key: mine } = await uploaded(renter);
    const { key: theirs } = await uploaded(other);
    const res = await grant({
      user_id: renter.id,
      read: [{ key: mine }, { bucket: defaultBucket, key: `users/${other.id}/${theirs}` }],
      write: [{ key: 'out.txt' }],
    });
    expect(res.statusCode).toBe(403);
    expect(res.json().code).toBe('FOLDER_NOT_OWNED');
    expect(res.json().detail).toMatch(/^read\[1\]: /);
    expect(res.body).not.toContain('X-Amz-Signature');
  });

  it("refuses a key that passes 1024 bytes once in the user's folder (400 naming the entry), which S3 would refuse", async () => {
    // 1000 bytes as the user names it: valid on its own, 1043 with users/<id>/ in front.
    const long = `${'a'.repeat(995)}.txt`;
    const res = await grant({ user_id: renter.id, write: [{ key: 'ok.txt' }, { key: long }] });
    expect(res.statusCode).toBe(400);
    expect(res.json().detail).toMatch(/^write\[1\]: the stored key must be at most 1024 bytes/);
    expect(res.json().errors[0].path).toBe('body.write.1.key');
    expect(res.body).not.toContain('X-Amz-Signature');
  });

  it("refuses another user's bucket (403 BUCKET_NOT_OWNED) naming the entry", async () => {
    const bucket = await bucketOf(other);
    const res = await grant({ user_id: renter.id, write: [{ key: 'ok.txt' }, { bucket, key: 'stolen.txt' }] });
    expect(res.statusCode).toBe(403);
    expect(res.json().code).toBe('BUCKET_NOT_OWNED');
    expect(res.json().detail).toMatch(/^write\[1\]: /);
    expect(res.body).not.toContain('X-Amz-Signature');
  });

  it('answers a missing bucket and a missing input with 404 naming the entry, and signs nothing', async () => {
    const bucket = uniqueBucket('missing');
    const noBucket = await grant({ user_id: renter.id, write: [{ bucket, key: 'x' }] });
    expect(noBucket.statusCode).toBe(404);
    expect(noBucket.json().code).toBe('BUCKET_NOT_FOUND');
    expect(noBucket.json().detail).toMatch(/^write\[0\]: /);

    const { key: present } = await uploaded(renter);
    const noObject = await grant({
      user_id: renter.id,
      read: [{ key: present }, { key: 'never-uploaded.bin' }],
      write: [{ key: 'out.txt' }],
    });
    expect(noObject.statusCode).toBe(404);
    expect(noObject.json().code).toBe('OBJECT_NOT_FOUND');
    expect(noObject.json().detail).toMatch(/^read\[1\]: /);
    expect(noObject.body).not.toContain('X-Amz-Signature');
  });

  it('is for platform services and admins: a renter and a provider daemon get 403 ROLE_REQUIRED', async () => {
    const daemon = await svc.issuer.client('daemon', renter.id);
    const body = { user_id: renter.id, write: [{ key: 'out.txt' }] };
    for (const caller of [renter, daemon]) {
      const res = await grant(body, caller);
      expect(res.statusCode).toBe(403);
      expect(res.json().code).toBe('ROLE_REQUIRED');
    }
    expect((await grant(body, await svc.issuer.user(['admin']))).statusCode).toBe(200);
  });

  it.each([
    [{ read: [{ key: 'a/../b' }] }, 'body.read.0.key'],
    [{ write: [{ key: 'ok' }, { key: '/abs' }] }, 'body.write.1.key'],
    [{ write: [{ bucket: 'Bad_Bucket', key: 'x' }] }, 'body.write.0.bucket'],
    [{ write: [{ key: 'x', size: 3 }] }, 'body.write.0.size'],
    [{ read: Array.from({ length: 65 }, (_, i) => ({ key: `k${i}` })) }, 'body.read'],
    [{ expiry: '2h' }, 'body.expiry'],
    [{ expiry: '1h1s' }, 'body.expiry'],
    [{ expiry: '0s' }, 'body.expiry'],
    [{ expiry: 'soon' }, 'body.expiry'],
    [{ user_id: 'me' }, 'body.user_id'],
  ])('answers %j with 400 naming %s', async (fields, field) => {
    const res = await grant({ user_id: renter.id, ...fields });
    expect(res.statusCode).toBe(400);
    expect(res.json().code).toBe('VALIDATION_ERROR');
    expect(res.json().errors.map((e: { path: string }) => e.path)).toContain(field);
  });

  it('gives a write URL that neither reads its object nor writes another key (403 at the store)', async () => {
    const k = `outputs/${key()}`;
    const { url } = (await grant({ user_id: renter.id, write: [{ key: k }] })).json().write[0];
    expect((await put(url, 'first')).status).toBe(200);
    expect((await fetch(url)).status).toBe(403);
    const elsewhere = url.replace(encodeURIComponent(k.split('/')[1]!), 'elsewhere.txt');
    expect(elsewhere).not.toBe(url);
    expect((await put(elsewhere, 'sneaky')).status).toBe(403);
    const listed = await svc.app.inject({ url: '/objects/list?prefix=outputs/', headers: renter.headers });
    expect(listed.json().map((o: { key: string }) => o.key)).not.toContain('outputs/elsewhere.txt');
  });

  it('gives URLs the store refuses once their expiry has passed', async () => {
    const { key: k } = await uploaded(renter);
    const { url } = (await grant({ user_id: renter.id, read: [{ key: k }], expiry: '1s' })).json().read[0];
    await new Promise((r) => setTimeout(r, 2100));
    expect((await fetch(url)).status).toBe(403);
  });

  it('needs a bucket on every entry when no default bucket is configured (400 naming the field)', async () => {
    const bare = await startService({ objectStore: { default_bucket: '' } });
    try {
      const res = await bare.app.inject({
        method: 'POST',
        url: '/grants',
        payload: { user_id: renter.id, read: [], write: [{ key: 'out.txt' }] },
        headers: service.headers,
      });
      expect(res.statusCode).toBe(400);
      expect(res.json().errors.map((e: { path: string }) => e.path)).toEqual(['body.write.0.bucket']);
    } finally {
      await bare.close();
    }
  });
});
