/**
 * Who may use which bucket and key (the README's access table): every route × every kind of caller, the default
 * bucket's per-user folders, and owner records that outlive the instance that wrote them.
 */
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { CreateBucketCommand } from '@aws-sdk/client-s3';
import {
  type AccessRule,
  accessCallers,
  type CallerName,
  checkAccessTable,
  type TableCaller,
  uninjected,
} from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService, storeClient, type TestService, uniqueBucket } from './helpers.ts';

let svc: TestService;
let callers: Record<CallerName, TableCaller>;
let ownersBucket: string;

const as = (caller: TableCaller, req: { method?: string; url: string; payload?: unknown; headers?: object }) =>
  uninjected(svc.app)({ method: 'GET', ...req, headers: { ...caller.headers, ...req.headers } } as never);

const key = () => `k-${randomBytes(4).toString('hex')}.txt`;

/** An object of the owner's bucket, written by its owner. */
async function ownersObject(): Promise<string> {
  const k = `data/${key()}`;
  const res = await as(callers.owner, { method: 'PUT', url: `/objects/${ownersBucket}/${k}`, payload: 'hello' });
  expect(res.statusCode).toBe(201);
  return k;
}

/** An object in the caller's own folder of the default bucket, written by the caller (if it may). */
async function ownDefaultObject(caller: TableCaller): Promise<string> {
  const k = key();
  await as(caller, { method: 'PUT', url: `/objects/${k}`, payload: 'mine' });
  return k;
}

/** An unfinished upload of the caller in its folder (with a part, for completing), or a made-up ID for a caller
 * that may not start one. */
async function ownUpload(caller: TableCaller, withPart = false): Promise<string> {
  const res = await as(caller, { method: 'POST', url: '/uploads', payload: { key: key() } });
  if (res.statusCode !== 201) return randomUUID();
  const id = res.json().upload_id as string;
  if (withPart) await as(caller, { method: 'PUT', url: `/uploads/${id}/parts/1`, payload: 'part' });
  return id;
}

beforeAll(async () => {
  svc = await startService();
  callers = await accessCallers(svc.issuer);
  ownersBucket = uniqueBucket('owned');
  expect((await as(callers.owner, { method: 'POST', url: `/buckets/${ownersBucket}` })).statusCode).toBe(201);
});
afterAll(() => svc?.close());

/** The bucket's owner, its daemon, admins and platform services; another user 403; gateway and scheduler 403. */
const OWNED = (ok: number) => ({ owner: ok, daemon: ok, admin: ok, service: ok, others: 403 }) as const;
/** Anyone with business with objects, each in their own folder. */
const OWN_FOLDER = (ok: number) =>
  ({
    owner: ok,
    other_user: ok,
    renter: ok,
    admin: ok,
    service: ok,
    daemon: ok,
    other_daemon: ok,
    others: 403,
  }) as const;

function table(): Record<string, AccessRule> {
  return {
    'POST /buckets/:bucketName': {
      request: () => ({ url: `/buckets/${uniqueBucket('new')}` }),
      expect: OWN_FOLDER(201),
    },
    'GET /objects/:bucketName/list': { request: () => ({ url: `/objects/${ownersBucket}/list` }), expect: OWNED(200) },
    'PUT /objects/:bucketName/*': {
      request: () => ({ url: `/objects/${ownersBucket}/up/${key()}`, payload: 'x' }),
      expect: OWNED(201),
    },
    'GET /objects/:bucketName/*': {
      request: async () => ({ url: `/objects/${ownersBucket}/${await ownersObject()}` }),
      expect: OWNED(200),
    },
    'HEAD /objects/:bucketName/*': {
      request: async () => ({ url: `/objects/${ownersBucket}/${await ownersObject()}` }),
      expect: OWNED(200),
    },
    'DELETE /objects/:bucketName/*': {
      request: async () => ({ url: `/objects/${ownersBucket}/${await ownersObject()}` }),
      expect: OWNED(204),
    },
    'POST /presigned-url/:bucketName/*': {
      request: () => ({ url: `/presigned-url/${ownersBucket}/${key()}`, payload: { method: 'PUT' } }),
      expect: OWNED(200),
    },
    'GET /objects/list': { request: () => ({}), expect: OWN_FOLDER(200) },
    'PUT /objects/*': { request: () => ({ url: `/objects/${key()}`, payload: 'x' }), expect: OWN_FOLDER(201) },
    'GET /objects/*': {
      request: async (c) => ({ url: `/objects/${await ownDefaultObject(c)}` }),
      expect: OWN_FOLDER(200),
    },
    'HEAD /objects/*': {
      request: async (c) => ({ url: `/objects/${await ownDefaultObject(c)}` }),
      expect: OWN_FOLDER(200),
    },
    'DELETE /objects/*': {
      request: async (c) => ({ url: `/objects/${await ownDefaultObject(c)}` }),
      expect: OWN_FOLDER(204),
    },
    // A copy within the caller's own folder: whoever may write there; others' objects: the tests in copy.test.ts.
    'POST /objects/copy': {
      request: async (c) => ({ payload: { source: { key: await ownDefaultObject(c) }, destination: { key: key() } } }),
      expect: OWN_FOLDER(201),
    },
    'POST /presigned-url/*': {
      request: () => ({ url: `/presigned-url/${key()}`, payload: { method: 'GET' } }),
      expect: OWN_FOLDER(200),
    },
    // Resumable uploads: started where the caller may write; every step after for the upload's owner only.
    'POST /uploads': { request: () => ({ payload: { key: key() } }), expect: OWN_FOLDER(201) },
    'GET /uploads': { request: () => ({}), expect: OWN_FOLDER(200) },
    'GET /uploads/:uploadId': {
      request: async (c) => ({ url: `/uploads/${await ownUpload(c)}` }),
      expect: OWN_FOLDER(200),
    },
    'PUT /uploads/:uploadId/parts/:partNumber': {
      request: async (c) => ({ url: `/uploads/${await ownUpload(c)}/parts/1`, payload: 'part' }),
      expect: OWN_FOLDER(200),
    },
    // A part copied from an object of the caller's own folder into their own upload; others': copy.test.ts.
    'POST /uploads/:uploadId/parts/:partNumber/copy': {
      request: async (c) => ({
        url: `/uploads/${await ownUpload(c)}/parts/1/copy`,
        // The object's ETag: the MD5 of its bytes ('mine'), as the store tags a single PUT.
        payload: {
          source: { key: await ownDefaultObject(c) },
          source_etag: `"${createHash('md5').update('mine').digest('hex')}"`,
        },
      }),
      expect: OWN_FOLDER(200),
    },
    'POST /uploads/:uploadId/complete': {
      request: async (c) => ({ url: `/uploads/${await ownUpload(c, true)}/complete`, payload: {} }),
      expect: OWN_FOLDER(201),
    },
    'DELETE /uploads/:uploadId': {
      request: async (c) => ({ url: `/uploads/${await ownUpload(c)}` }),
      expect: OWN_FOLDER(204),
    },
    // URLs for a user's workload: asked for by billing (a service) or an admin, never by users or daemons.
    'POST /grants': {
      request: () => ({ payload: { user_id: callers.owner.id, write: [{ key: `outputs/${key()}` }] } }),
      expect: { admin: 200, service: 200, others: 403 },
    },
  };
}

describe('access table of the storage service', () => {
  it('answers every route as the table says, for every kind of caller, and has a rule for every route', async () => {
    const report = await checkAccessTable(svc.app, callers, table());
    expect(report).toEqual({ unlisted: [], unknown: [], mismatches: [] });
  });
});

describe('bucket owners', () => {
  it("refuses someone else's bucket with 403 BUCKET_NOT_OWNED and never shows its objects", async () => {
    const k = await ownersObject();
    for (const [method, url] of [
      ['GET', `/objects/${ownersBucket}/${k}`],
      ['GET', `/objects/${ownersBucket}/list`],
      ['POST', `/buckets/${ownersBucket}`],
    ] as const) {
      const res = await as(callers.other_user, { method, url });
      expect(res.statusCode, `${method} ${url}`).toBe(403);
      expect(res.json().code).toBe('BUCKET_NOT_OWNED');
      expect(res.body).not.toContain('hello');
    }
    const again = await as(callers.owner, { method: 'POST', url: `/buckets/${ownersBucket}` });
    expect(again.statusCode).toBe(201);
    expect(again.json().created).toBe(false);
  });

  it('answers a missing bucket 404 whoever asks', async () => {
    const res = await as(callers.other_user, { url: `/objects/${uniqueBucket('missing')}/a.txt` });
    expect(res.statusCode).toBe(404);
    expect(res.json().code).toBe('BUCKET_NOT_FOUND');
  });

  it('gives a new bucket to exactly one of two users who create it at once', async () => {
    const bucket = uniqueBucket('race');
    const answers = await Promise.all(
      [callers.owner, callers.other_user, callers.owner, callers.other_user].map((c) =>
        as(c, { method: 'POST', url: `/buckets/${bucket}` }).then((r) => ({ who: c.name, status: r.statusCode })),
      ),
    );
    const winners = new Set(answers.filter((a) => a.status === 201).map((a) => a.who));
    expect(winners.size).toBe(1);
    expect(answers.filter((a) => !winners.has(a.who)).every((a) => a.status === 403)).toBe(true);
  });

  it('keeps owners in the object store: a second instance knows them', async () => {
    const second = await startService();
    try {
      const other = await uninjected(second.app)({
        url: `/objects/${ownersBucket}/list`,
        headers: callers.other_user.headers,
      });
      expect(other.statusCode).toBe(403);
      const owner = await uninjected(second.app)({
        url: `/objects/${ownersBucket}/list`,
        headers: callers.owner.headers,
      });
      expect(owner.statusCode).toBe(200);
    } finally {
      await second.close();
    }
  });

  it('leaves a bucket made outside the platform to admins and services', async () => {
    const bucket = uniqueBucket('outside');
    const s3 = storeClient();
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
    s3.destroy();
    expect((await as(callers.owner, { method: 'POST', url: `/buckets/${bucket}` })).json().code).toBe(
      'BUCKET_NOT_OWNED',
    );
    expect((await as(callers.owner, { url: `/objects/${bucket}/list` })).statusCode).toBe(403);
    expect((await as(callers.admin, { url: `/objects/${bucket}/list` })).statusCode).toBe(200);
    expect((await as(callers.service, { method: 'PUT', url: `/objects/${bucket}/x`, payload: 'y' })).statusCode).toBe(
      201,
    );
  });
});

describe('the default bucket: a folder per user', () => {
  it("keeps each user's keys in their own folder, relative on the default-bucket routes", async () => {
    const k = key();
    const put = await as(callers.owner, { method: 'PUT', url: `/objects/${k}`, payload: 'owner data' });
    expect(put.statusCode).toBe(201);
    expect(put.json().key).toBe(k);
    // Another user's same key is another object.
    expect((await as(callers.other_user, { url: `/objects/${k}` })).statusCode).toBe(404);
    const listed = (await as(callers.owner, { url: '/objects/list' })).json() as { key: string }[];
    expect(listed.map((o) => o.key)).toContain(k);
    const theirs = (await as(callers.other_user, { url: '/objects/list' })).json() as { key: string }[];
    expect(theirs.map((o) => o.key)).not.toContain(k);
    // The owner's daemon sees the owner's folder; an admin sees the full key.
    expect((await as(callers.daemon, { url: `/objects/${k}` })).body).toBe('owner data');
    const full = `users/${callers.owner.id}/${k}`;
    expect((await as(callers.admin, { url: `/objects/${svc.config.object_store.default_bucket}/${full}` })).body).toBe(
      'owner data',
    );
  });

  it("refuses keys and listings outside the caller's folder on the bucket-named routes", async () => {
    const bucket = svc.config.object_store.default_bucket;
    const mine = `users/${callers.other_user.id}/notes.txt`;
    const theirs = `users/${callers.owner.id}/notes.txt`;
    expect(
      (await as(callers.other_user, { method: 'PUT', url: `/objects/${bucket}/${mine}`, payload: 'a' })).statusCode,
    ).toBe(201);
    const refused = await as(callers.other_user, { method: 'PUT', url: `/objects/${bucket}/${theirs}`, payload: 'b' });
    expect(refused.statusCode).toBe(403);
    expect(refused.json().code).toBe('FOLDER_NOT_OWNED');
    expect((await as(callers.other_user, { url: `/objects/${bucket}/list` })).statusCode).toBe(403);
    const listed = await as(callers.other_user, {
      url: `/objects/${bucket}/list?prefix=${encodeURIComponent(`users/${callers.other_user.id}/`)}`,
    });
    expect(listed.statusCode).toBe(200);
    const keys = (listed.json() as { key: string }[]).map((o) => o.key);
    expect(keys).toContain(mine);
    expect(keys.every((k) => k.startsWith(`users/${callers.other_user.id}/`))).toBe(true);
    const presign = await as(callers.other_user, {
      method: 'POST',
      url: `/presigned-url/${bucket}/${theirs}`,
      payload: { method: 'GET' },
    });
    expect(presign.statusCode).toBe(403);
  });

  it('answers 401 before reading an anonymous upload', async () => {
    const res = await uninjected(svc.app)({ method: 'PUT', url: `/objects/${ownersBucket}/x`, payload: 'data' });
    expect(res.statusCode).toBe(401);
    expect(res.headers['www-authenticate']).toMatch(/^Bearer/);
  });
});
