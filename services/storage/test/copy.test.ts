/**
 * POST /objects/copy: the store copies (no byte through the service), a user only from what they may read into what
 * they may write, and the copy is an object like any uploaded one (listed, catalogued for metering).
 */
import { createHash, randomBytes } from 'node:crypto';
import { HeadBucketCommand, ListMultipartUploadsCommand, PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { type Caller, uninjected } from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { COPIES_AT_ONCE, CopySlots } from '../src/routes/object-copy.ts';
import { startService, storeClient, type TestService, uniqueBucket } from './helpers.ts';

let svc: TestService;
let owner: Caller;
let other: Caller;
let ownersBucket: string;

const as = (caller: Caller, req: { method?: string; url: string; payload?: unknown; headers?: object }) =>
  uninjected(svc.app)({ method: 'GET', ...req, headers: { ...caller.headers, ...req.headers } } as never);

const copy = (caller: Caller, source: object, destination: object) =>
  as(caller, { method: 'POST', url: '/objects/copy', payload: { source, destination } });

/** A copy asked for by the service's admin (any bucket). */
const copyAs = (service: TestService, source: object, destination: object) =>
  service.app.inject({ method: 'POST', url: '/objects/copy', payload: { source, destination } });

const sha256 = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

/** The service's copy client (a store client of its own): each command it sends, by name. */
const copier = (service: TestService) => (service.store as unknown as { copier: S3Client }).copier;

/** Runs `before` ahead of each `command` the service's copy client sends, until `end()`. */
function onCommand(service: TestService, command: string, before: () => Promise<unknown>): { end(): void } {
  const name = `test-${randomBytes(4).toString('hex')}`;
  copier(service).middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName === command) await before();
      return next(args);
    },
    { step: 'initialize', name },
  );
  return { end: () => copier(service).middlewareStack.remove(name) };
}

/** Writes the default bucket's `key` anew behind the service's back (another writer), once. */
function replaceSource(key: string, bucket = svc.config.object_store.default_bucket) {
  let done = false;
  return async () => {
    if (done) return;
    done = true;
    const s3 = storeClient();
    await s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: 'version 2' }));
    s3.destroy();
  };
}

beforeAll(async () => {
  svc = await startService();
  owner = await svc.issuer.user(['renter']);
  other = await svc.issuer.user(['renter']);
  ownersBucket = uniqueBucket('copies');
  expect((await as(owner, { method: 'POST', url: `/buckets/${ownersBucket}` })).statusCode).toBe(201);
});
afterAll(() => svc?.close());

describe('copying an object', () => {
  it("copies bytes and content type within the caller's folder, keys of any characters, and lists the copy", async () => {
    // A key whose characters a copy source must carry URL-encoded (a `?` or `#` would end it, `%` and `+` change it).
    const from = `in/a b+c?d#e%f&g=ü ${randomBytes(3).toString('hex')}.csv`;
    const bytes = `x,y\n${randomBytes(16).toString('hex')}\n`;
    const put = await as(owner, {
      method: 'PUT',
      url: `/objects/${encodeURIComponent(from)}`,
      payload: bytes,
      headers: { 'content-type': 'text/csv' },
    });
    expect(put.statusCode).toBe(201);
    const stored = (await svc.catalog.usageByOwner()).get(owner.id) ?? 0;
    const res = await copy(owner, { key: from }, { key: 'kept/one.csv' });
    expect(res.statusCode).toBe(201);
    expect(res.json()).toMatchObject({
      key: 'kept/one.csv',
      size: Buffer.byteLength(bytes),
      content_type: 'text/csv',
      etag: put.json().etag,
      is_prefix: false,
    });
    const got = await as(owner, { url: `/objects/${encodeURIComponent('kept/one.csv')}` });
    expect(got.body).toBe(bytes);
    expect(got.headers['content-type']).toBe('text/csv');
    // The source stays; the copy is listed right away (catalogued, so metered as the owner's).
    expect((await as(owner, { url: `/objects/${encodeURIComponent(from)}` })).body).toBe(bytes);
    const listed = (await as(owner, { url: '/objects/list?prefix=kept/' })).json() as Array<{ key: string }>;
    expect(listed.map((o) => o.key)).toEqual(['kept/one.csv']);
    expect((await svc.catalog.usageByOwner()).get(owner.id)).toBe(stored + Buffer.byteLength(bytes));
  });

  it('copies between a bucket of the caller and their folder, and replaces what the destination held', async () => {
    await as(owner, { method: 'PUT', url: `/objects/${ownersBucket}/model.bin`, payload: 'weights v1' });
    await as(owner, { method: 'PUT', url: '/objects/model.bin', payload: 'an older, longer object' });
    const res = await copy(owner, { bucket: ownersBucket, key: 'model.bin' }, { key: 'model.bin' });
    expect(res.statusCode).toBe(201);
    expect(res.json().size).toBe('weights v1'.length);
    expect((await as(owner, { url: '/objects/model.bin' })).body).toBe('weights v1');
    // And back, into the bucket by its name, with the folder's key in full.
    const folderKey = `users/${owner.id}/model.bin`;
    const back = await copy(
      owner,
      { bucket: svc.config.object_store.default_bucket, key: folderKey },
      { bucket: ownersBucket, key: 'copies/model.bin' },
    );
    expect(back.statusCode).toBe(201);
    expect(back.json().key).toBe('copies/model.bin');
  });

  it("copies nothing from or into someone else's bucket or folder", async () => {
    await as(owner, { method: 'PUT', url: `/objects/${ownersBucket}/secret.txt`, payload: 'mine' });
    await as(other, { method: 'PUT', url: '/objects/theirs.txt', payload: 'theirs' });
    const defaultBucket = svc.config.object_store.default_bucket;
    const refusals = [
      // Reading the owner's bucket or folder into the other user's own folder.
      [await copy(other, { bucket: ownersBucket, key: 'secret.txt' }, { key: 'stolen.txt' }), 'BUCKET_NOT_OWNED'],
      [
        await copy(other, { bucket: defaultBucket, key: `users/${owner.id}/model.bin` }, { key: 'stolen.txt' }),
        'FOLDER_NOT_OWNED',
      ],
      // Writing the other user's object into the owner's bucket or folder.
      [await copy(other, { key: 'theirs.txt' }, { bucket: ownersBucket, key: 'planted.txt' }), 'BUCKET_NOT_OWNED'],
      [
        await copy(other, { key: 'theirs.txt' }, { bucket: defaultBucket, key: `users/${owner.id}/planted.txt` }),
        'FOLDER_NOT_OWNED',
      ],
    ] as const;
    for (const [res, code] of refusals) {
      expect(res.statusCode).toBe(403);
      expect(res.json().code).toBe(code);
    }
    expect((await as(other, { url: '/objects/stolen.txt' })).statusCode).toBe(404);
    expect((await as(owner, { url: `/objects/${ownersBucket}/planted.txt` })).statusCode).toBe(404);
    expect((await as(owner, { url: '/objects/planted.txt' })).statusCode).toBe(404);
  });

  it('answers a missing source or bucket 404, a copy onto itself and bad input 400, and writes nothing', async () => {
    const missing = await copy(owner, { key: 'no-such.txt' }, { key: 'x.txt' });
    expect(missing.statusCode).toBe(404);
    expect(missing.json().code).toBe('OBJECT_NOT_FOUND');
    // An admin may name any bucket: a missing one is 404, and the store makes no bucket of it.
    const noBucket = uniqueBucket('nowhere');
    await svc.app.inject({ method: 'PUT', url: `/objects/${ownersBucket}/a.txt`, payload: 'a' });
    const toNowhere = await copyAs(svc, { bucket: ownersBucket, key: 'a.txt' }, { bucket: noBucket, key: 'a.txt' });
    expect(toNowhere.statusCode).toBe(404);
    expect(toNowhere.json().code).toBe('BUCKET_NOT_FOUND');
    const s3 = storeClient();
    await expect(s3.send(new HeadBucketCommand({ Bucket: noBucket }))).rejects.toThrow();
    s3.destroy();

    await as(owner, { method: 'PUT', url: '/objects/same.txt', payload: 'same' });
    const onto = await copy(owner, { key: 'same.txt' }, { key: 'same.txt' });
    expect(onto.statusCode).toBe(400);
    expect(onto.json().errors).toEqual([{ path: 'body.destination', message: 'the same object as body.source' }]);
    for (const payload of [
      {},
      { source: { key: 'same.txt' } },
      { source: { key: 'same.txt' }, destination: { key: '' } },
      { source: { key: 'same.txt', bucket: 'No_Such' }, destination: { key: 'b.txt' } },
      // An unknown field is refused, as on every route of the platform (docs/conventions.md).
      { source: { key: 'same.txt', version: 2 }, destination: { key: 'b.txt' } },
      // A lone surrogate: JSON can carry it, UTF-8 (and so the store) cannot.
      { source: { key: 'same.txt' }, destination: { key: 'b\ud800.txt' } },
    ]) {
      const res = await as(owner, { method: 'POST', url: '/objects/copy', payload });
      expect(res.statusCode, JSON.stringify(payload)).toBe(400);
      expect(res.json().code).toBe('VALIDATION_ERROR');
    }
  });

  it("refuses the platform's own buckets and a missing bucket to users, and names a missing source bucket", async () => {
    await as(owner, { method: 'PUT', url: '/objects/mine.txt', payload: 'mine' });
    const records = svc.config.object_store.owners_bucket;
    const intoRecords = await copy(owner, { key: 'mine.txt' }, { bucket: records, key: `${ownersBucket}.json` });
    expect(intoRecords.statusCode).toBe(403);
    expect(intoRecords.json().code).toBe('BUCKET_NOT_OWNED');
    const fromRecords = await copy(owner, { bucket: records, key: `${ownersBucket}.json` }, { key: 'owners.json' });
    expect(fromRecords.statusCode).toBe(403);
    const missing = uniqueBucket('missing');
    const intoMissing = await copy(owner, { key: 'mine.txt' }, { bucket: missing, key: 'x.txt' });
    expect(intoMissing.statusCode).toBe(404);
    expect(intoMissing.json().code).toBe('BUCKET_NOT_FOUND');
    // An admin's source in a bucket that is not there: the bucket is named, not the key.
    const fromMissing = await copyAs(svc, { bucket: missing, key: 'x.txt' }, { bucket: ownersBucket, key: 'x.txt' });
    expect(fromMissing.statusCode).toBe(404);
    expect(fromMissing.json().code).toBe('BUCKET_NOT_FOUND');
  });

  it('copies nothing of a source replaced while it is copied: 409 SOURCE_CHANGED', async () => {
    await as(owner, { method: 'PUT', url: '/objects/moving.txt', payload: 'version 1' });
    const replaced = onCommand(svc, 'CopyObjectCommand', replaceSource(`users/${owner.id}/moving.txt`));
    const res = await copy(owner, { key: 'moving.txt' }, { key: 'moved.txt' });
    replaced.end();
    expect(res.statusCode).toBe(409);
    expect(res.json().code).toBe('SOURCE_CHANGED');
    expect((await as(owner, { url: '/objects/moved.txt' })).statusCode).toBe(404);
    expect((await as(owner, { url: '/objects/moving.txt' })).body).toBe('version 2');
  });

  it(`has at most ${COPIES_AT_ONCE} copies of one user under way at once: another waits for a slot`, async () => {
    await as(owner, { method: 'PUT', url: '/objects/many.txt', payload: 'many' });
    let release = () => {};
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    let held = 0;
    const gate = onCommand(svc, 'CopyObjectCommand', async () => {
      held++;
      await released;
    });
    let answered = 0;
    const answers = Array.from({ length: COPIES_AT_ONCE + 1 }, (_, i) =>
      copy(owner, { key: 'many.txt' }, { key: `many/${i}.txt` }).then((r) => {
        answered++;
        return r;
      }),
    );
    await vi.waitFor(() => expect(held).toBe(COPIES_AT_ONCE), { timeout: 30_000 });
    // Another user's copy has slots of its own.
    await as(other, { method: 'PUT', url: '/objects/theirs-too.txt', payload: 't' });
    const theirs = copy(other, { key: 'theirs-too.txt' }, { key: 'copied.txt' });
    await vi.waitFor(() => expect(held).toBe(COPIES_AT_ONCE + 1), { timeout: 30_000 });
    expect(answered).toBe(0);
    release();
    const statuses = (await Promise.all([...answers, theirs])).map((r) => r.statusCode);
    gate.end();
    expect(statuses).toEqual(Array(COPIES_AT_ONCE + 2).fill(201));
    // The owner's fifth reached the store only once a slot was free: every copy went to the store once.
    expect(held).toBe(COPIES_AT_ONCE + 2);
  });

  it('answers 429 with Retry-After when no slot frees in time, and hands a freed slot to who waits', async () => {
    const slots = new CopySlots(200);
    const frees = await Promise.all(Array.from({ length: COPIES_AT_ONCE }, () => slots.take('u')));
    const refused = await slots.take('u').then(
      () => undefined,
      (err: unknown) => err as { code?: string; headers?: Record<string, string> },
    );
    expect(refused).toMatchObject({ code: 'RATE_LIMITED', headers: { 'retry-after': '2' } });
    const waiting = slots.take('u');
    frees[0]!();
    frees[0]!(); // freed once only
    const next = await waiting;
    await expect(slots.take('u')).rejects.toMatchObject({ code: 'RATE_LIMITED' });
    next();
    await slots.take('u');
    // Another owner is not held up by this one.
    await slots.take('v');
  });
});

describe('a copy larger than one copy request', () => {
  let parted: TestService;
  beforeAll(async () => {
    parted = await startService({ objectStore: { copy_part_size: 5 * 1024 * 1024 } });
  });
  afterAll(() => parted?.close());

  it('is copied by the store in parts, byte for byte, and leaves no unfinished upload', async () => {
    const bucket = uniqueBucket('parts');
    await parted.store.ensureBucket(bucket);
    const bytes = randomBytes(12 * 1024 * 1024 + 3);
    const put = await parted.app.inject({
      method: 'PUT',
      url: `/objects/${bucket}/big.bin`,
      payload: bytes,
      headers: { 'content-type': 'application/x-weights' },
    });
    expect(put.statusCode).toBe(201);
    // The store's copy requests, by kind.
    let parts = 0;
    let whole = 0;
    const counted = [
      onCommand(parted, 'UploadPartCopyCommand', async () => parts++),
      onCommand(parted, 'CopyObjectCommand', async () => whole++),
    ];
    const res = await copyAs(parted, { bucket, key: 'big.bin' }, { bucket, key: 'copy/big.bin' });
    for (const c of counted) c.end();
    expect(res.statusCode).toBe(201);
    expect(res.json()).toMatchObject({ size: bytes.length, content_type: 'application/x-weights' });
    // Three parts (5 + 5 + 2 MiB and 3 bytes), each copied by the store from a range of the source.
    expect({ parts, whole }).toEqual({ parts: 3, whole: 0 });
    const got = await parted.app.inject({ method: 'GET', url: `/objects/${bucket}/copy/big.bin` });
    expect(sha256(got.rawPayload)).toBe(sha256(bytes));
    const s3 = storeClient();
    const open = await s3.send(new ListMultipartUploadsCommand({ Bucket: bucket }));
    s3.destroy();
    expect(open.Uploads ?? []).toEqual([]);
  });

  it('copies nothing of a source replaced mid-way, and leaves no unfinished upload', async () => {
    const bucket = uniqueBucket('parts');
    await parted.store.ensureBucket(bucket);
    await parted.app.inject({
      method: 'PUT',
      url: `/objects/${bucket}/big.bin`,
      payload: randomBytes(11 * 1024 * 1024),
    });
    const replaced = onCommand(parted, 'UploadPartCopyCommand', replaceSource('big.bin', bucket));
    const res = await copyAs(parted, { bucket, key: 'big.bin' }, { bucket, key: 'copy.bin' });
    replaced.end();
    expect(res.statusCode).toBe(409);
    expect(res.json().code).toBe('SOURCE_CHANGED');
    expect((await parted.app.inject({ method: 'HEAD', url: `/objects/${bucket}/copy.bin` })).statusCode).toBe(404);
    const s3 = storeClient();
    const open = await s3.send(new ListMultipartUploadsCommand({ Bucket: bucket }));
    s3.destroy();
    expect(open.Uploads ?? []).toEqual([]);
  });
});

describe('copying an object part by part into an upload (POST /uploads/{id}/parts/{n}/copy)', () => {
  const MiB = 1024 * 1024;

  /** Starts an upload of the caller's to `key` (their folder): its ID. */
  async function startUpload(caller: Caller, key: string): Promise<string> {
    const res = await as(caller, { method: 'POST', url: '/uploads', payload: { key } });
    expect(res.statusCode, res.body).toBe(201);
    return res.json().upload_id;
  }

  const copyPart = (caller: Caller, uploadId: string, n: number, body: object) =>
    as(caller, { method: 'POST', url: `/uploads/${uploadId}/parts/${n}/copy`, payload: body });

  /** An object of the caller's folder holding `bytes`: its ETag. */
  async function stored(caller: Caller, key: string, bytes: Buffer | string): Promise<string> {
    const put = await as(caller, { method: 'PUT', url: `/objects/${encodeURIComponent(key)}`, payload: bytes });
    expect(put.statusCode).toBe(201);
    return put.json().etag;
  }

  it('joins parts the store copied from ranges of objects into the object, listed as parts sent are', async () => {
    const big = randomBytes(11 * MiB + 5);
    const etag = await stored(owner, 'ranged/big.bin', big);
    const tail = await stored(owner, 'ranged/tail.txt', 'the tail');
    const id = await startUpload(owner, 'ranged/joined.bin');
    // Part 1: the first 6 MiB of big.bin; part 2: the rest of it; part 3: another object, whole.
    const first = await copyPart(owner, id, 1, {
      source: { key: 'ranged/big.bin' },
      range: `bytes=0-${6 * MiB - 1}`,
      source_etag: etag,
    });
    expect(first.statusCode, first.body).toBe(200);
    expect(first.json()).toMatchObject({ part_number: 1, size: 6 * MiB });
    const second = await copyPart(owner, id, 2, {
      source: { key: 'ranged/big.bin' },
      range: `bytes=${6 * MiB}-${big.length - 1}`,
      source_etag: etag,
    });
    expect(second.json()).toMatchObject({ part_number: 2, size: big.length - 6 * MiB });
    const third = await copyPart(owner, id, 3, { source: { key: 'ranged/tail.txt' }, source_etag: tail });
    expect(third.json()).toMatchObject({ part_number: 3, size: 8 });
    // The upload lists them as it lists parts sent.
    const listed = await as(owner, { url: `/uploads/${id}` });
    expect(listed.json().parts.map((p: { size: number }) => p.size)).toEqual([6 * MiB, big.length - 6 * MiB, 8]);
    const done = await as(owner, { method: 'POST', url: `/uploads/${id}/complete`, payload: {} });
    expect(done.statusCode, done.body).toBe(201);
    expect(done.json()).toMatchObject({ key: 'ranged/joined.bin', size: big.length + 8 });
    const got = await as(owner, { url: `/objects/${encodeURIComponent('ranged/joined.bin')}` });
    expect(sha256(got.rawPayload)).toBe(sha256(Buffer.concat([big, Buffer.from('the tail')])));
  });

  it('copies no part of another version, beyond the source, from what the caller may not read, or into another upload', async () => {
    const etag = await stored(owner, 'ranged/src.txt', 'version 1');
    const id = await startUpload(owner, 'ranged/out.bin');
    const src = { key: 'ranged/src.txt' };
    // The source replaced since its ETag was read: 409, and no part stored; no ETag, `*` or a list names a version.
    const now = await stored(owner, 'ranged/src.txt', 'version 2');
    for (const named of [etag, '*', `${etag}, ${now}`]) {
      const stale = await copyPart(owner, id, 1, { source: src, source_etag: named });
      expect(stale.statusCode, named).toBe(409);
      expect(stale.json().code).toBe('SOURCE_CHANGED');
    }
    const unnamed = await copyPart(owner, id, 1, { source: src });
    expect(unnamed.statusCode).toBe(400);
    expect(JSON.stringify(unnamed.json().errors)).toContain('body.source_etag');
    const beyond = await copyPart(owner, id, 1, { source: src, range: 'bytes=0-9', source_etag: now });
    expect(beyond.statusCode).toBe(416);
    expect(beyond.json().code).toBe('RANGE_NOT_SATISFIABLE');
    for (const range of ['bytes=5-2', 'bytes=0-', '0-4', 'bytes=-4']) {
      const bad = await copyPart(owner, id, 1, { source: src, range, source_etag: now });
      expect(bad.statusCode, range).toBe(400);
      expect(JSON.stringify(bad.json().errors), range).toContain('body.range');
    }
    // Another user's object (their folder, their bucket): not readable; another user's upload: not theirs.
    const theirs = await stored(other, 'secret.txt', 'theirs');
    const foreign = await copyPart(owner, id, 1, { source: { key: `../${other.id}/secret.txt` }, source_etag: theirs });
    expect(foreign.statusCode).toBe(400);
    const intoTheirs = await copyPart(other, id, 1, { source: { key: 'secret.txt' }, source_etag: theirs });
    expect(intoTheirs.statusCode).toBe(404);
    expect(intoTheirs.json().code).toBe('UPLOAD_NOT_FOUND');
    const fromOwners = await copyPart(other, await startUpload(other, 'mine.bin'), 1, {
      source: { bucket: ownersBucket, key: 'x' },
      source_etag: theirs,
    });
    expect(fromOwners.statusCode).toBe(403);
    const listed = await as(owner, { url: `/uploads/${id}` });
    expect(listed.json().parts).toEqual([]);
    // An empty source, without a range: copied whole, a part of no byte.
    const empty = await stored(owner, 'ranged/empty.txt', '');
    const none = await copyPart(owner, id, 1, { source: { key: 'ranged/empty.txt' }, source_etag: empty });
    expect(none.statusCode, none.body).toBe(200);
    expect(none.json()).toMatchObject({ part_number: 1, size: 0 });
  });
});
