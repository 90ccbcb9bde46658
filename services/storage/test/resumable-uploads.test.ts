/**
 * Resumable uploads through the service against the real S3 server: parts sent over many requests (again after a
 * failure), listed, joined into the object or given up; owned by their user; bounded in size and number; swept when
 * they expire, their parts freed at the store.
 */
import { randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { Readable } from 'node:stream';
import { ListMultipartUploadsCommand, type S3Client } from '@aws-sdk/client-s3';
import { type Caller, uninjected } from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_OPEN_UPLOADS, MIN_PART_SIZE } from '../src/domain/uploads/resumable.ts';
import { startService, storeClient, type TestService, uniqueBucket } from './helpers.ts';

let svc: TestService;
let renter: Caller;
let other: Caller;
let s3: S3Client;

const as = (caller: Caller, req: { method?: string; url: string; payload?: unknown; headers?: object }) =>
  uninjected(svc.app)({ method: 'GET', ...req, headers: { ...caller.headers, ...req.headers } } as never);

const key = () => `big/${randomBytes(4).toString('hex')}.bin`;

async function start(caller: Caller, body: Record<string, unknown>) {
  const res = await as(caller, { method: 'POST', url: '/uploads', payload: body });
  expect(res.statusCode, res.body).toBe(201);
  return res.json() as { upload_id: string; key: string; bucket: string | null; expires_at: string };
}

const putPart = (caller: Caller, id: string, n: number, bytes: Buffer) =>
  as(caller, {
    method: 'PUT',
    url: `/uploads/${id}/parts/${n}`,
    payload: bytes,
    headers: { 'content-type': 'application/octet-stream' },
  });

async function storeUploads(bucket: string): Promise<string[]> {
  const out = await s3.send(new ListMultipartUploadsCommand({ Bucket: bucket }));
  return (out.Uploads ?? []).map((u) => u.UploadId ?? '');
}

beforeAll(async () => {
  svc = await startService({ objectStore: { max_upload_size: 12 * 1024 * 1024 } });
  renter = await svc.issuer.user(['renter']);
  other = await svc.issuer.user(['renter']);
  s3 = storeClient();
});
afterAll(async () => {
  s3?.destroy();
  await svc?.close();
});

describe('a resumable upload', () => {
  it('takes parts in any order, lists what arrived, and joins them into the object in the caller’s folder', async () => {
    const k = key();
    const upload = await start(renter, { key: k, content_type: 'application/x-model' });
    expect(upload).toMatchObject({ key: k, bucket: null });
    const first = randomBytes(MIN_PART_SIZE);
    const last = randomBytes(1000);
    // The last part first, as a client sending in parallel may.
    const two = await putPart(renter, upload.upload_id, 2, last);
    expect(two.statusCode, two.body).toBe(200);
    expect(two.json()).toMatchObject({ part_number: 2, size: 1000 });
    const listed = await as(renter, { url: `/uploads/${upload.upload_id}` });
    expect(listed.json().parts.map((p: { part_number: number }) => p.part_number)).toEqual([2]);
    expect((await putPart(renter, upload.upload_id, 1, first)).statusCode).toBe(200);
    const parts = (await as(renter, { url: `/uploads/${upload.upload_id}` })).json().parts;
    expect(parts.map((p: { part_number: number; size: number }) => [p.part_number, p.size])).toEqual([
      [1, MIN_PART_SIZE],
      [2, 1000],
    ]);
    // Its list shows it until it is complete.
    const mine = (await as(renter, { url: '/uploads' })).json();
    expect(mine.map((u: { upload_id: string }) => u.upload_id)).toContain(upload.upload_id);

    const done = await as(renter, { method: 'POST', url: `/uploads/${upload.upload_id}/complete`, payload: {} });
    expect(done.statusCode, done.body).toBe(201);
    expect(done.json()).toMatchObject({ key: k, size: MIN_PART_SIZE + 1000, content_type: 'application/x-model' });
    const got = await as(renter, { url: `/objects/${encodeURIComponent(k)}` });
    expect(got.statusCode).toBe(200);
    expect(Buffer.compare(got.rawPayload, Buffer.concat([first, last]))).toBe(0);
    // In the renter's folder of the default bucket, as `PUT /objects/{key}` would have put it.
    const bucket = svc.config.object_store.default_bucket;
    const admin = await as(await svc.issuer.user(['admin']), {
      method: 'HEAD',
      url: `/objects/${bucket}/users/${renter.id}/${k}`,
    });
    expect(admin.statusCode).toBe(200);
    // Gone once complete: no record, no unfinished upload at the store.
    expect((await as(renter, { url: `/uploads/${upload.upload_id}` })).json().code).toBe('UPLOAD_NOT_FOUND');
    expect(await storeUploads(bucket)).toEqual([]);
  });

  it('replaces a part sent again, and refuses to join parts whose ETags the client did not see', async () => {
    const bucket = uniqueBucket('resume');
    expect((await as(renter, { method: 'POST', url: `/buckets/${bucket}` })).statusCode).toBe(201);
    const upload = await start(renter, { bucket, key: 'model.bin' });
    const stale = (await putPart(renter, upload.upload_id, 1, randomBytes(MIN_PART_SIZE))).json();
    const fresh = randomBytes(MIN_PART_SIZE);
    const now = (await putPart(renter, upload.upload_id, 1, fresh)).json();
    const tail = (await putPart(renter, upload.upload_id, 2, Buffer.from('tail'))).json();
    const refused = await as(renter, {
      method: 'POST',
      url: `/uploads/${upload.upload_id}/complete`,
      payload: {
        parts: [
          { part_number: 1, etag: stale.etag },
          { part_number: 2, etag: tail.etag },
        ],
      },
    });
    expect(refused.statusCode).toBe(409);
    expect(refused.json().code).toBe('PARTS_CHANGED');
    const done = await as(renter, {
      method: 'POST',
      url: `/uploads/${upload.upload_id}/complete`,
      payload: {
        parts: [
          { part_number: 1, etag: now.etag },
          { part_number: 2, etag: tail.etag },
        ],
      },
    });
    expect(done.statusCode, done.body).toBe(201);
    const got = await as(renter, { url: `/objects/${bucket}/model.bin` });
    expect(Buffer.compare(got.rawPayload, Buffer.concat([fresh, Buffer.from('tail')]))).toBe(0);
  });

  it('keeps nothing of a part whose body was cut short, so the client sends it again', async () => {
    const upload = await start(renter, { key: key() });
    const base = new URL(await svc.app.listen({ host: '127.0.0.1', port: 0 }));
    const status = await new Promise<number>((resolve, reject) => {
      const req = request(
        {
          host: base.hostname,
          port: base.port,
          method: 'PUT',
          path: `/uploads/${upload.upload_id}/parts/1`,
          headers: { ...renter.headers, 'content-length': String(MIN_PART_SIZE) },
        },
        (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        },
      );
      req.on('error', () => resolve(0));
      req.write(randomBytes(1024 * 1024), () => setTimeout(() => req.destroy(), 100));
      req.on('close', () => setTimeout(() => resolve(-1), 500));
      void reject;
    });
    expect([0, -1, 400]).toContain(status);
    // The part is not there: the upload holds nothing.
    // Waited for up to 20 s (1 s by default): a busy machine can be slow to drop the cut part.
    await expect
      .poll(async () => (await as(renter, { url: `/uploads/${upload.upload_id}` })).json().parts, { timeout: 20_000 })
      .toEqual([]);
    expect((await putPart(renter, upload.upload_id, 1, Buffer.from('whole'))).statusCode).toBe(200);
    const done = await as(renter, { method: 'POST', url: `/uploads/${upload.upload_id}/complete`, payload: {} });
    expect(done.json().size).toBe(5);
  });

  it('is aborted on request: its parts freed at the store, its ID unknown', async () => {
    const bucket = uniqueBucket('abort');
    expect((await as(renter, { method: 'POST', url: `/buckets/${bucket}` })).statusCode).toBe(201);
    const upload = await start(renter, { bucket, key: 'x.bin' });
    await putPart(renter, upload.upload_id, 1, Buffer.from('part'));
    expect(await storeUploads(bucket)).toHaveLength(1);
    expect((await as(renter, { method: 'DELETE', url: `/uploads/${upload.upload_id}` })).statusCode).toBe(204);
    expect(await storeUploads(bucket)).toEqual([]);
    expect((await as(renter, { method: 'DELETE', url: `/uploads/${upload.upload_id}` })).statusCode).toBe(404);
    expect((await putPart(renter, upload.upload_id, 2, Buffer.from('late'))).json().code).toBe('UPLOAD_NOT_FOUND');
  });
});

describe('whose upload it is', () => {
  it("answers another user's upload ID as if it did not exist, and lists only the caller's own", async () => {
    const upload = await start(renter, { key: key() });
    for (const req of [
      { url: `/uploads/${upload.upload_id}` },
      { method: 'DELETE', url: `/uploads/${upload.upload_id}` },
      { method: 'POST', url: `/uploads/${upload.upload_id}/complete`, payload: {} },
    ]) {
      const res = await as(other, req);
      expect(res.statusCode, req.url).toBe(404);
      expect(res.json().code).toBe('UPLOAD_NOT_FOUND');
    }
    expect((await putPart(other, upload.upload_id, 1, Buffer.from('mine now'))).statusCode).toBe(404);
    const theirs = (await as(other, { url: '/uploads' })).json();
    expect(theirs.map((u: { upload_id: string }) => u.upload_id)).not.toContain(upload.upload_id);
    // Still whole for its owner.
    expect((await as(renter, { url: `/uploads/${upload.upload_id}` })).json().parts).toEqual([]);
  });

  it("starts no upload into someone else's bucket or folder", async () => {
    const bucket = uniqueBucket('theirs');
    expect((await as(other, { method: 'POST', url: `/buckets/${bucket}` })).statusCode).toBe(201);
    const refused = await as(renter, { method: 'POST', url: '/uploads', payload: { bucket, key: 'a.bin' } });
    expect(refused.statusCode).toBe(403);
    expect(refused.json().code).toBe('BUCKET_NOT_OWNED');
    const folder = await as(renter, {
      method: 'POST',
      url: '/uploads',
      payload: { bucket: svc.config.object_store.default_bucket, key: `users/${other.id}/a.bin` },
    });
    expect(folder.json().code).toBe('FOLDER_NOT_OWNED');
    const bad = await as(renter, { method: 'POST', url: '/uploads', payload: { key: '../escape.bin' } });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().errors[0].path).toBe('body.key');
  });
});

describe("an upload's bounds", () => {
  it('refuses a part without a Content-Length, a part that would pass max_upload_size, and small middle parts', async () => {
    const upload = await start(renter, { key: key() });
    const chunked = await as(renter, {
      method: 'PUT',
      url: `/uploads/${upload.upload_id}/parts/1`,
      // A stream: sent chunked, with no Content-Length.
      payload: Readable.from([Buffer.from('x')]),
    });
    expect(chunked.statusCode).toBe(400);
    expect(chunked.json().code).toBe('LENGTH_REQUIRED');
    // max_upload_size is 12 MiB here: 10 MiB held, 3 MiB more is refused before a byte is read.
    expect((await putPart(renter, upload.upload_id, 1, randomBytes(MIN_PART_SIZE))).statusCode).toBe(200);
    expect((await putPart(renter, upload.upload_id, 2, randomBytes(MIN_PART_SIZE))).statusCode).toBe(200);
    const over = await putPart(renter, upload.upload_id, 3, randomBytes(3 * 1024 * 1024));
    expect(over.statusCode).toBe(413);
    expect(over.json().code).toBe('PAYLOAD_TOO_LARGE');
    // Replacing a part counts that part once.
    expect((await putPart(renter, upload.upload_id, 2, randomBytes(1000))).statusCode).toBe(200);
    expect((await putPart(renter, upload.upload_id, 3, randomBytes(1000))).statusCode).toBe(200);
    const small = await as(renter, { method: 'POST', url: `/uploads/${upload.upload_id}/complete`, payload: {} });
    expect(small.statusCode).toBe(400);
    expect(small.json()).toMatchObject({ code: 'PART_TOO_SMALL' });
    expect(small.json().detail).toContain('part 2');
    const range = await putPart(renter, upload.upload_id, 10_001, Buffer.from('x'));
    expect(range.statusCode).toBe(400);
    expect(range.json().code).toBe('VALIDATION_ERROR');
    // A part number is written in digits: anything Number() would also read is not part 1.
    for (const number of ['0x1', '1e0', '%201', '1.0']) {
      const loose = await as(renter, {
        method: 'PUT',
        url: `/uploads/${upload.upload_id}/parts/${number}`,
        payload: Buffer.from('x'),
        headers: { 'content-type': 'application/octet-stream' },
      });
      expect(loose.statusCode, number).toBe(400);
      expect(loose.json().code).toBe('VALIDATION_ERROR');
    }
  });

  it('joins nothing without parts, and keeps at most a few unfinished uploads per user', async () => {
    const user = await svc.issuer.user(['renter']);
    const empty = await start(user, { key: key() });
    const none = await as(user, { method: 'POST', url: `/uploads/${empty.upload_id}/complete`, payload: {} });
    expect(none.json().code).toBe('NO_PARTS');
    for (let i = 1; i < MAX_OPEN_UPLOADS; i++) await start(user, { key: key() });
    const refused = await as(user, { method: 'POST', url: '/uploads', payload: { key: key() } });
    expect(refused.statusCode).toBe(409);
    expect(refused.json().code).toBe('TOO_MANY_UPLOADS');
    // Giving one up makes room.
    expect((await as(user, { method: 'DELETE', url: `/uploads/${empty.upload_id}` })).statusCode).toBe(204);
    await start(user, { key: key() });
  });
});

describe('bounds under concurrent requests', () => {
  it('admits exactly the bound of starts sent at once, round after round, on one instance or two', async () => {
    // A second instance of the service on the same database and store, as a deployment runs several.
    const twin = await startService({ objectStore: { default_bucket: svc.config.object_store.default_bucket } });
    try {
      const apps = [svc.app, twin.app];
      for (let round = 0; round < 4; round++) {
        const user = await svc.issuer.user(['renter']);
        const answers = await Promise.all(
          Array.from({ length: 16 }, (_, i) =>
            uninjected(apps[round % 2 === 0 ? 0 : i % 2]!)({
              method: 'POST',
              url: '/uploads',
              payload: { key: key() },
              headers: user.headers,
            } as never),
          ),
        );
        const statuses = answers.map((a) => (a.statusCode === 201 ? 201 : `${a.statusCode} ${a.json().code}`));
        expect(
          statuses.filter((s) => s === 201),
          `round ${round}: ${statuses.join(', ')}`,
        ).toHaveLength(MAX_OPEN_UPLOADS);
        expect(statuses.filter((s) => s !== 201)).toEqual(Array(16 - MAX_OPEN_UPLOADS).fill('409 TOO_MANY_UPLOADS'));
        expect((await as(user, { url: '/uploads' })).json()).toHaveLength(MAX_OPEN_UPLOADS);
      }
    } finally {
      await twin.close();
    }
  });

  it("admits exactly the bound with the lock of an embedded database (pnpm start's): the instance's queue", async () => {
    const embedded = await startService({ embeddedStartLock: true });
    try {
      for (let round = 0; round < 3; round++) {
        const user = await svc.issuer.user(['renter']);
        const answers = await Promise.all(
          Array.from({ length: 16 }, () =>
            uninjected(embedded.app)({
              method: 'POST',
              url: '/uploads',
              payload: { key: key() },
              headers: user.headers,
            } as never),
          ),
        );
        expect(
          answers.filter((a) => a.statusCode === 201),
          `round ${round}`,
        ).toHaveLength(MAX_OPEN_UPLOADS);
        expect(answers.filter((a) => a.statusCode !== 201).map((a) => a.json().code)).toEqual(
          Array(16 - MAX_OPEN_UPLOADS).fill('TOO_MANY_UPLOADS'),
        );
      }
    } finally {
      await embedded.close();
    }
  });

  it('pages the open uploads one at a time, oldest first, each once', async () => {
    const user = await svc.issuer.user(['renter']);
    for (let i = 0; i < 3; i++) await start(user, { key: key() });
    const seen: string[] = [];
    let url: string | undefined = '/uploads?limit=1';
    while (url) {
      const page = await as(user, { url });
      seen.push(...page.json().map((u: { upload_id: string }) => u.upload_id));
      const next = page.headers['x-next-cursor'] as string | undefined;
      url = next ? `/uploads?limit=1&cursor=${encodeURIComponent(next)}` : undefined;
    }
    expect(seen).toHaveLength(3);
    expect(new Set(seen).size).toBe(3);
  });

  it('gives an upload up when parts sent at once pass max_upload_size together', async () => {
    const user = await svc.issuer.user(['renter']);
    const upload = await start(user, { key: key() });
    // max_upload_size is 12 MiB: each 5 MiB part fits the room it sees, four together do not.
    const answers = await Promise.all(
      [1, 2, 3, 4].map((n) => putPart(user, upload.upload_id, n, randomBytes(MIN_PART_SIZE))),
    );
    expect(answers.some((a) => a.statusCode === 413)).toBe(true);
    // What is left holds no more than the bound: nothing, once given up.
    const after = await as(user, { url: `/uploads/${upload.upload_id}` });
    if (after.statusCode === 200) {
      const held = after.json().parts.reduce((sum: number, p: { size: number }) => sum + p.size, 0);
      expect(held).toBeLessThanOrEqual(12 * 1024 * 1024);
    } else {
      expect(after.json().code).toBe('UPLOAD_NOT_FOUND');
    }
  });
});

describe('expiry', () => {
  it('aborts an upload not completed within upload_expiry, freeing its parts at the store', async () => {
    const short = await startService({ objectStore: { upload_expiry: '6s' } });
    try {
      const user = await short.issuer.user(['renter']);
      const bucket = uniqueBucket('expire');
      const call = (req: { method?: string; url: string; payload?: unknown; headers?: object }) =>
        uninjected(short.app)({ method: 'GET', ...req, headers: { ...user.headers, ...req.headers } } as never);
      expect((await call({ method: 'POST', url: `/buckets/${bucket}` })).statusCode).toBe(201);
      const upload = (await call({ method: 'POST', url: '/uploads', payload: { bucket, key: 'left.bin' } })).json();
      const part = await call({
        method: 'PUT',
        url: `/uploads/${upload.upload_id}/parts/1`,
        payload: Buffer.from('abandoned'),
        headers: { 'content-type': 'application/octet-stream' },
      });
      expect(part.statusCode).toBe(200);
      expect(await storeUploads(bucket)).toHaveLength(1);
      // The sweeper (every 1 s here) aborts it at the store; the service forgets it.
      await expect.poll(() => storeUploads(bucket), { timeout: 20_000, interval: 250 }).toEqual([]);
      expect((await call({ url: `/uploads/${upload.upload_id}` })).json().code).toBe('UPLOAD_NOT_FOUND');
      expect((await call({ url: '/uploads' })).json()).toEqual([]);
    } finally {
      await short.close();
    }
  });
});
