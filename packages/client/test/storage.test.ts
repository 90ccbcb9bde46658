/**
 * Objects through the typed client (`objectStore`), against the real storage service on the test run's S3 server:
 * every kind of body up and back, keys with slashes in a named bucket and in the default one (encoded), ranges,
 * conditional and redirected downloads, presigned URLs, listings page by page, and problems as `ApiError`s.
 */
import { createHash, randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService, type TestService, uniqueBucket } from '../../../services/storage/test/helpers.ts';
import { ApiError, type ObjectStore, objectStore, staticToken } from '../src/index.ts';

let svc: TestService;
let admin: ObjectStore;
let renter: ObjectStore;
let renterId: string;
const bucket = uniqueBucket('client');

beforeAll(async () => {
  svc = await startService({ listen: true });
  admin = objectStore({ baseUrl: svc.url, token: staticToken(svc.auth.authorization!.replace(/^Bearer /, '')) });
  const user = await svc.issuer.user(['renter']);
  renterId = user.id;
  renter = objectStore({ baseUrl: svc.url, token: staticToken(user.token) });
  await admin.ensureBucket(bucket);
});
afterAll(() => svc?.close());

const sha = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');

/** A stream of `size` pseudo-random bytes in 1 MiB chunks, and their digest. */
function bigStream(size: number): { stream: Readable; digest: string } {
  const hash = createHash('sha256');
  const chunks: Buffer[] = [];
  for (let left = size; left > 0; left -= 1 << 20) {
    const chunk = randomBytes(Math.min(left, 1 << 20));
    hash.update(chunk);
    chunks.push(chunk);
  }
  return { stream: Readable.from(chunks), digest: hash.digest('hex') };
}

describe('objectStore', () => {
  it('uploads bytes, text, a Blob and streams, and downloads each as it was', async () => {
    const bytes = randomBytes(1000);
    const cases: Array<[string, Parameters<ObjectStore['upload']>[1], Uint8Array, number?]> = [
      ['bytes.bin', bytes, bytes],
      ['text.txt', 'hello, objects', new TextEncoder().encode('hello, objects')],
      ['blob.bin', new Blob([bytes]), bytes],
      ['web-stream.bin', new Blob([bytes]).stream(), bytes, bytes.length],
      ['array-buffer.bin', bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length), bytes],
    ];
    for (const [key, body, expected, contentLength] of cases) {
      const info = await admin.upload({ bucket, key }, body, { contentLength });
      expect(info, key).toMatchObject({ key, size: expected.length, is_prefix: false });
      const back = await admin.download({ bucket, key });
      expect(sha(await back.bytes()), key).toBe(sha(expected));
    }
    expect((await admin.head({ bucket, key: 'text.txt' })).contentType).toMatch(/^text\/plain/);
  });

  it('streams a 20 MiB Node stream up chunked (multipart at the store) and back', async () => {
    const { stream, digest } = bigStream(20 << 20);
    const info = await admin.upload({ bucket, key: 'big/stream.bin' }, stream, { contentType: 'application/x-test' });
    expect(info.size).toBe(20 << 20);
    const back = await admin.download({ bucket, key: 'big/stream.bin' });
    expect(back.contentLength).toBe(20 << 20);
    expect(back.contentType).toBe('application/x-test');
    const hash = createHash('sha256');
    for await (const chunk of Readable.fromWeb(back.body as never)) hash.update(chunk as Buffer);
    expect(hash.digest('hex')).toBe(digest);
  });

  it('lets an upload take longer than the time limit of one attempt (which cuts only a silent server off)', async () => {
    const token = staticToken(svc.auth.authorization!.replace(/^Bearer /, ''));
    const strict = objectStore({ baseUrl: svc.url, token, timeoutMs: 300 });
    /** Eight chunks, 150 ms apart: the service answers after 1.2 s, four times the limit. */
    async function* slow() {
      for (let i = 0; i < 8; i++) {
        await new Promise((r) => setTimeout(r, 150));
        yield Buffer.alloc(1024, i);
      }
    }
    const streamed = await strict.upload({ bucket, key: 'slow/stream.bin' }, Readable.from(slow()));
    expect(streamed.size).toBe(8 * 1024);
    // The caller bounds it with a signal of its own: aborted mid-body (after the third chunk, whatever the machine's
    // load does to timers), the upload fails and stores nothing, even when a garbage collection ran meanwhile (it
    // once dropped the Request that linked the caller's signal to the fetch, and the upload went on).
    const caller = new AbortController();
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    async function* abortedMidway() {
      for (let i = 0; i < 8; i++) {
        await new Promise((r) => setTimeout(r, 150));
        if (i === 2) gc();
        if (i === 3) caller.abort();
        yield Buffer.alloc(1024, i);
      }
    }
    await expect(
      strict.upload({ bucket, key: 'slow/aborted.bin' }, Readable.from(abortedMidway()), { signal: caller.signal }),
    ).rejects.toThrow();
    // Asked without the 300 ms limit, which a busy machine could outlast on an ordinary HEAD.
    await expect(admin.head({ bucket, key: 'slow/aborted.bin' })).rejects.toMatchObject({ status: 404 });
  });

  it('keeps slashes in keys, in a named bucket and (encoded) in the default one', async () => {
    await admin.upload({ bucket, key: 'a/b/c.json' }, '{"deep":true}', { contentType: 'application/json' });
    expect(await (await admin.download({ bucket, key: 'a/b/c.json' })).text()).toBe('{"deep":true}');
    // The default bucket: the renter's own folder, a key with a slash sent as one encoded segment.
    const info = await renter.upload({ key: 'runs/1/model.bin' }, 'weights');
    expect(info.key).toBe('runs/1/model.bin');
    expect(await (await renter.download({ key: 'runs/1/model.bin' })).text()).toBe('weights');
    const listed = await renter.list(undefined, { prefix: 'runs/' });
    expect(listed.objects.map((o) => o.key)).toEqual(['runs/1/model.bin']);
    // Stored under the renter's folder: the admin sees it there, in the default bucket named.
    const stored = await admin.head({
      bucket: svc.config.object_store.default_bucket,
      key: `users/${renterId}/runs/1/model.bin`,
    });
    expect(stored.contentLength).toBe(7);
  });

  it('downloads a range, answers not modified for a matching ETag, and follows a redirect to the store', async () => {
    await admin.upload({ bucket, key: 'range.txt' }, '0123456789');
    const part = await admin.download({ bucket, key: 'range.txt' }, { range: { start: 2, end: 5 } });
    expect(part.status).toBe(206);
    expect(part.contentRange).toBe('bytes 2-5/10');
    expect(await part.text()).toBe('2345');
    expect(await (await admin.download({ bucket, key: 'range.txt' }, { range: 'bytes=7-' })).text()).toBe('789');

    const { etag } = await admin.head({ bucket, key: 'range.txt' });
    const same = await admin.download({ bucket, key: 'range.txt' }, { ifNoneMatch: etag! });
    expect(same).toMatchObject({ status: 304, notModified: true });
    expect((await same.bytes()).length).toBe(0);

    const redirected = await admin.download({ bucket, key: 'range.txt' }, { redirect: true });
    expect(redirected.status).toBe(200);
    expect(await redirected.text()).toBe('0123456789');
  });

  it('presigns a PUT and a GET that work without a token', async () => {
    const put = await admin.presign({ bucket, key: 'signed/upload.txt' }, { method: 'PUT', expiry: '5m' });
    expect(put).toMatchObject({ method: 'PUT', bucket, key: 'signed/upload.txt' });
    expect((await fetch(put.url, { method: 'PUT', body: 'via the store' })).status).toBe(200);
    const get = await admin.presign({ bucket, key: 'signed/upload.txt' }, { method: 'GET' });
    expect(await (await fetch(get.url)).text()).toBe('via the store');
  });

  it('lists page by page with the cursor, and all at once', async () => {
    const folder = uniqueBucket('page');
    for (const n of [1, 2, 3, 4, 5]) await admin.upload({ bucket, key: `${folder}/${n}.txt` }, String(n));
    const first = await admin.list(bucket, { prefix: `${folder}/`, limit: 2 });
    expect(first.objects.map((o) => o.key)).toEqual([`${folder}/1.txt`, `${folder}/2.txt`]);
    expect(first.nextCursor).toEqual(expect.any(String));
    const second = await admin.list(bucket, { prefix: `${folder}/`, limit: 2, cursor: first.nextCursor! });
    expect(second.objects.map((o) => o.key)).toEqual([`${folder}/3.txt`, `${folder}/4.txt`]);
    const all: string[] = [];
    const { listAll } = admin; // a method taken off the store works as well
    for await (const o of listAll(bucket, { prefix: `${folder}/`, limit: 2 })) all.push(o.key);
    expect(all).toEqual([1, 2, 3, 4, 5].map((n) => `${folder}/${n}.txt`));
  });

  it('deletes, and answers problems as ApiErrors with the service code', async () => {
    await admin.upload({ bucket, key: 'gone.txt' }, 'x');
    await admin.remove({ bucket, key: 'gone.txt' });
    await expect(admin.head({ bucket, key: 'gone.txt' })).rejects.toMatchObject({ status: 404 });
    const missing = await admin.download({ bucket, key: 'gone.txt' }).catch((err: unknown) => err);
    expect(missing).toBeInstanceOf(ApiError);
    expect(missing).toMatchObject({ status: 404, code: 'OBJECT_NOT_FOUND' });
    // Someone else's bucket.
    const refused = await renter.upload({ bucket, key: 'x.txt' }, 'x').catch((err: unknown) => err);
    expect(refused).toMatchObject({ status: 403, code: 'BUCKET_NOT_OWNED' });
    // Only the object read: one replaced since stays.
    const first = await admin.upload({ bucket, key: 'kept.txt' }, 'one');
    await admin.upload({ bucket, key: 'kept.txt' }, 'two');
    await expect(admin.remove({ bucket, key: 'kept.txt' }, { ifMatch: first.etag! })).rejects.toMatchObject({
      status: 412,
      code: 'OBJECT_CHANGED',
    });
    const now = await admin.head({ bucket, key: 'kept.txt' });
    await admin.remove({ bucket, key: 'kept.txt' }, { ifMatch: now.etag! });
    await expect(admin.head({ bucket, key: 'kept.txt' })).rejects.toMatchObject({ status: 404 });
  });

  it('copies an object part by part at the store, ranges of one version, into an upload', async () => {
    const bytes = randomBytes(6 * 1024 * 1024 + 7);
    const source = await renter.upload({ key: 'parts/source.bin' }, bytes);
    const upload = await renter.uploads.start({ key: 'parts/copy.bin' });
    const split = 5 * 1024 * 1024;
    const parts = [
      await renter.uploads.copyPart(
        upload.upload_id,
        1,
        { key: 'parts/source.bin' },
        {
          range: { start: 0, end: split - 1 },
          sourceEtag: source.etag!,
        },
      ),
      await renter.uploads.copyPart(
        upload.upload_id,
        2,
        { key: 'parts/source.bin' },
        {
          range: { start: split, end: bytes.length - 1 },
          sourceEtag: source.etag!,
        },
      ),
    ];
    expect(parts.map((p) => p.size)).toEqual([split, bytes.length - split]);
    const done = await renter.uploads.complete(upload.upload_id);
    expect(done).toMatchObject({ key: 'parts/copy.bin', size: bytes.length });
    const back = await renter.download({ key: 'parts/copy.bin' });
    expect(sha(await back.bytes())).toBe(sha(bytes));
    // Of another version than the one named: refused.
    await renter.upload({ key: 'parts/source.bin' }, 'replaced');
    const again = await renter.uploads.start({ key: 'parts/again.bin' });
    await expect(
      renter.uploads.copyPart(again.upload_id, 1, { key: 'parts/source.bin' }, { sourceEtag: source.etag! }),
    ).rejects.toMatchObject({ status: 409, code: 'SOURCE_CHANGED' });
    await renter.uploads.abort(again.upload_id);
  });
});
