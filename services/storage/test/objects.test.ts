import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deleteObject } from '../src/domain/objects.ts';
import { rawRequest, startService, type TestService, uniqueBucket } from './helpers.ts';

let svc: TestService;
let bucket: string;

beforeAll(async () => {
  svc = await startService({ listen: true });
  bucket = uniqueBucket();
  await svc.store.ensureBucket(bucket);
});
afterAll(() => svc.close());

const put = (url: string, payload: string | Buffer, headers: Record<string, string> = {}) =>
  svc.app.inject({ method: 'PUT', url, payload, headers });

/** A GET or HEAD of range.txt (16 bytes, written by the download tests), with the given request headers. */
const rangeTxt = (method: 'GET' | 'HEAD', headers: Record<string, string> = {}) =>
  svc.app.inject({ method, url: `/objects/${bucket}/range.txt`, headers });

describe('upload', () => {
  it('stores the bytes and answers 201 with ObjectInfo, using the Content-Type header', async () => {
    const res = await put(`/objects/${bucket}/docs/readme.txt`, 'hello world', { 'content-type': 'text/markdown' });
    expect(res.statusCode).toBe(201);
    const info = res.json();
    expect(info).toMatchObject({ key: 'docs/readme.txt', size: 11, content_type: 'text/markdown', is_prefix: false });
    expect(info.etag).toMatch(/^"[0-9a-f]{32}"$/);
    expect(Date.parse(info.last_modified)).not.toBeNaN();
    const get = await svc.app.inject({ method: 'GET', url: `/objects/${bucket}/docs/readme.txt` });
    expect(get.body).toBe('hello world');
    expect(get.headers['content-type']).toBe('text/markdown');
  });

  it('guesses the content type from the extension when the header is absent', async () => {
    const res = await put(`/objects/${bucket}/model/config.json`, Buffer.from('{"layers": 12}'));
    expect(res.json().content_type).toBe('application/json');
    const csv = await put(`/objects/${bucket}/data/set.csv`, Buffer.from('a,b\n1,2\n'));
    expect(csv.json().content_type).toBe('text/csv');
  });

  it('falls back to application/octet-stream when the extension tells nothing', async () => {
    const res = await put(`/objects/${bucket}/weights.unknownext`, Buffer.from([0, 1, 2, 3]));
    expect(res.json().content_type).toBe('application/octet-stream');
    const noExt = await put(`/objects/${bucket}/blob`, Buffer.from([9]));
    expect(noExt.json().content_type).toBe('application/octet-stream');
  });

  it.each([
    ['html', 'application/octet-stream'],
    ['exe', 'application/octet-stream'],
    ['json', 'application/octet-stream'],
    ['dir/json', 'application/octet-stream'],
    ['dir.html/readme', 'application/octet-stream'],
    ['archive.tar.gz', 'application/gzip'],
    // A dotfile has no extension: the name after its leading dot is not a type.
    ['.bashrc', 'application/octet-stream'],
    ['.json', 'application/octet-stream'],
    ['conf/.html', 'application/octet-stream'],
    ['trailing.', 'application/octet-stream'],
    ['a.HTML', 'text/html'],
  ])('guesses from an extension of the last segment only: %j is %s', async (key, type) => {
    const res = await put(`/objects/${bucket}/${key}`, Buffer.from('x'));
    expect(res.statusCode).toBe(201);
    expect(res.json().content_type).toBe(type);
    const head = await svc.app.inject({ method: 'HEAD', url: `/objects/${bucket}/${key}` });
    expect(head.headers['content-type']).toBe(type);
  });

  it('stores a bare key named like an extension with the type of its Content-Type header', async () => {
    const res = await put(`/objects/${bucket}/yaml`, 'a: 1', { 'content-type': 'application/yaml' });
    expect(res.json().content_type).toBe('application/yaml');
  });

  it('stores a JSON body as raw bytes, not parsed', async () => {
    const raw = '{ "spaced" :  true }';
    await put(`/objects/${bucket}/raw.json`, raw, { 'content-type': 'application/json' });
    const get = await svc.app.inject({ method: 'GET', url: `/objects/${bucket}/raw.json` });
    expect(get.body).toBe(raw);
  });

  it('stores an empty object', async () => {
    const res = await put(`/objects/${bucket}/empty.bin`, Buffer.alloc(0));
    expect(res.statusCode).toBe(201);
    expect(res.json().size).toBe(0);
  });

  it('accepts keys with unicode and spaces', async () => {
    const key = 'datasets/übung 1/naïve data.txt';
    const res = await put(`/objects/${bucket}/${encodeURI(key)}`, 'x');
    expect(res.statusCode).toBe(201);
    expect(res.json().key).toBe(key);
    const get = await svc.app.inject({ method: 'GET', url: `/objects/${bucket}/${encodeURI(key)}` });
    expect(get.body).toBe('x');
  });

  it.each([
    ['bad%01key', 'control characters'],
    ['a//b', 'empty segment'],
    ['x%2F%2Fy', 'empty segment'],
    ['k'.repeat(1025), 'at most 1024 bytes'],
    ['é'.repeat(513), 'at most 1024 bytes'],
  ])('rejects the key %j with 400', async (key, why) => {
    const res = await put(`/objects/${bucket}/${key}`, 'x');
    expect(res.statusCode).toBe(400);
    expect(res.json()).toMatchObject({ code: 'VALIDATION_ERROR' });
    expect(res.json().detail).toContain(why);
  });

  it.each([
    ['a/../b', '".." path segments'],
    ['a/./b', '"." or ".."'],
    ['a/%2E%2E/b', '".." path segments'],
    ['../escape', '".." path segments'],
  ])('rejects the dot-segment key %j sent verbatim over HTTP with 400', async (key, why) => {
    const res = await rawRequest(svc.url, 'PUT', `/objects/${bucket}/${key}`, 'x', svc.auth);
    expect(res.status).toBe(400);
    expect(JSON.parse(res.body).detail).toContain(why);
  });

  it('rejects an empty key (trailing slash) with 400', async () => {
    const res = await put(`/objects/${bucket}/`, 'x');
    expect(res.statusCode).toBe(400);
  });

  it('answers 404 BUCKET_NOT_FOUND when uploading into a missing bucket', async () => {
    const missing = uniqueBucket('missing');
    const res = await put(`/objects/${missing}/a.txt`, 'x');
    expect(res.statusCode).toBe(404);
    expect(res.json().code).toBe('BUCKET_NOT_FOUND');
  });
});

describe('download and HEAD', () => {
  beforeAll(async () => {
    await put(`/objects/${bucket}/range.txt`, '0123456789abcdef', { 'content-type': 'text/plain' });
  });

  it('returns Content-Type, Content-Length, ETag and Last-Modified on GET and HEAD', async () => {
    const get = await rangeTxt('GET');
    expect(get.statusCode).toBe(200);
    expect(get.body).toBe('0123456789abcdef');
    const head = await rangeTxt('HEAD');
    expect(head.statusCode).toBe(200);
    expect(head.body).toBe('');
    for (const res of [get, head]) {
      expect(res.headers['content-type']).toBe('text/plain');
      expect(res.headers['content-length']).toBe('16');
      expect(res.headers.etag).toMatch(/^"[0-9a-f]{32}"$/);
      expect(new Date(String(res.headers['last-modified'])).getTime()).not.toBeNaN();
    }
    expect(head.headers.etag).toBe(get.headers.etag);
    // The download streams past Fastify's reply: the platform headers and metrics must still be there.
    expect(get.headers['x-request-id']).toBeDefined();
    expect(get.headers['x-correlation-id']).toBeDefined();
    const metrics = await svc.app.inject({ method: 'GET', url: '/metrics' });
    expect(metrics.body).toMatch(
      /http_requests_total\{[^}]*method="GET"[^}]*route="\/objects\/:bucketName\/\*"[^}]*status_code="200"/,
    );
  });

  it('serves a byte range with 206 and Content-Range', async () => {
    const res = await rangeTxt('GET', { range: 'bytes=2-5' });
    expect(res.statusCode).toBe(206);
    expect(res.body).toBe('2345');
    expect(res.headers['content-range']).toBe('bytes 2-5/16');
    expect(res.headers['content-length']).toBe('4');
  });

  it.each([
    ['bytes=-4', 'cdef', 'bytes 12-15/16'],
    ['bytes=-16', '0123456789abcdef', 'bytes 0-15/16'],
    ['bytes=-100', '0123456789abcdef', 'bytes 0-15/16'],
  ])('serves the suffix range %j: the last bytes of the object', async (range, body, contentRange) => {
    const res = await rangeTxt('GET', { range });
    expect(res.statusCode).toBe(206);
    expect(res.body).toBe(body);
    expect(res.headers['content-range']).toBe(contentRange);
  });

  it('answers an unsatisfiable range with 416', async () => {
    const res = await rangeTxt('GET', { range: 'bytes=100-200' });
    expect(res.statusCode).toBe(416);
    expect(res.json().code).toBe('RANGE_NOT_SATISFIABLE');
  });

  it.each(['bytes=3-1', 'bytes=10-9'])(
    'ignores the invalid range %j (last before first): 200 with the whole object',
    async (range) => {
      const res = await rangeTxt('GET', { range });
      expect(res.statusCode).toBe(200);
      expect(res.body).toBe('0123456789abcdef');
      expect(res.headers['content-range']).toBeUndefined();
    },
  );

  it('serves a one-byte range whose first and last positions are equal', async () => {
    const res = await rangeTxt('GET', { range: 'bytes=3-3' });
    expect(res.statusCode).toBe(206);
    expect(res.body).toBe('3');
  });

  it('ignores a multi-range header and sends the whole object', async () => {
    const res = await rangeTxt('GET', { range: 'bytes=0-1,4-5' });
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe('0123456789abcdef');
  });

  it('answers 304 for a matching If-None-Match and 200 for another ETag', async () => {
    const { headers } = await rangeTxt('HEAD');
    const same = await rangeTxt('GET', { 'if-none-match': String(headers.etag) });
    expect(same.statusCode).toBe(304);
    expect(same.body).toBe('');
    expect(same.headers.etag).toBe(headers.etag);
    const other = await rangeTxt('GET', { 'if-none-match': '"0000"' });
    expect(other.statusCode).toBe(200);
  });

  it('answers HEAD with 304 and the validators for a matching If-None-Match or a later If-Modified-Since', async () => {
    const { headers } = await rangeTxt('HEAD');
    const same = await rangeTxt('HEAD', { 'if-none-match': String(headers.etag) });
    expect(same.statusCode).toBe(304);
    expect(same.body).toBe('');
    expect(same.headers.etag).toBe(headers.etag);
    expect(same.headers['last-modified']).toBe(headers['last-modified']);
    const since = await rangeTxt('HEAD', { 'if-modified-since': new Date(Date.now() + 3600_000).toUTCString() });
    expect(since.statusCode).toBe(304);
    const other = await rangeTxt('HEAD', { 'if-none-match': '"0000"' });
    expect(other.statusCode).toBe(200);
  });

  it('answers 304 when not modified since the given date, 200 when modified', async () => {
    const future = new Date(Date.now() + 3600_000).toUTCString();
    const notModified = await rangeTxt('GET', { 'if-modified-since': future });
    expect(notModified.statusCode).toBe(304);
    const past = new Date(Date.now() - 24 * 3600_000).toUTCString();
    const modified = await rangeTxt('GET', { 'if-modified-since': past });
    expect(modified.statusCode).toBe(200);
    const garbage = await rangeTxt('GET', { 'if-modified-since': 'not a date' });
    expect(garbage.statusCode).toBe(200);
  });

  it('answers a missing object with a 404 problem, and a missing bucket with BUCKET_NOT_FOUND', async () => {
    const res = await svc.app.inject({ method: 'GET', url: `/objects/${bucket}/nope.txt` });
    expect(res.statusCode).toBe(404);
    expect(res.headers['content-type']).toContain('application/problem+json');
    expect(res.json()).toMatchObject({ code: 'OBJECT_NOT_FOUND', status: 404 });
    const noBucket = await svc.app.inject({ method: 'GET', url: `/objects/${uniqueBucket('gone')}/a.txt` });
    expect(noBucket.statusCode).toBe(404);
    expect(noBucket.json().code).toBe('BUCKET_NOT_FOUND');
    const head = await svc.app.inject({ method: 'HEAD', url: `/objects/${bucket}/nope.txt` });
    expect(head.statusCode).toBe(404);
    expect(head.body).toBe('');
  });
});

describe('delete', () => {
  it('deletes with 204, after which GET is 404; deleting again is 404', async () => {
    await put(`/objects/${bucket}/tmp/delete-me.txt`, 'bye');
    const del = await svc.app.inject({ method: 'DELETE', url: `/objects/${bucket}/tmp/delete-me.txt` });
    expect(del.statusCode).toBe(204);
    expect(del.body).toBe('');
    const get = await svc.app.inject({ method: 'GET', url: `/objects/${bucket}/tmp/delete-me.txt` });
    expect(get.statusCode).toBe(404);
    const again = await svc.app.inject({ method: 'DELETE', url: `/objects/${bucket}/tmp/delete-me.txt` });
    expect(again.statusCode).toBe(404);
    expect(again.json().code).toBe('OBJECT_NOT_FOUND');
  });

  it('deletes with If-Match only while the object is the one named, else 412 OBJECT_CHANGED and it stays', async () => {
    const url = `/objects/${bucket}/tmp/conditional.txt`;
    const first = (await put(url, 'first')).json().etag as string;
    const second = (await put(url, 'second')).json().etag as string;
    const del = (ifMatch: string) => svc.app.inject({ method: 'DELETE', url, headers: { 'if-match': ifMatch } });
    // The version read before it was replaced, and a weak tag (never equal to a strong one), are refused.
    for (const stale of [first, `W/${second}`]) {
      const refused = await del(stale);
      expect(refused.statusCode).toBe(412);
      expect(refused.headers['content-type']).toContain('application/problem+json');
      expect(refused.json()).toMatchObject({ code: 'OBJECT_CHANGED', status: 412 });
      // Its ETag now is not told (the caller may delete, not necessarily read).
      expect(refused.json().detail).not.toContain(second.replaceAll('"', ''));
      expect((await svc.app.inject({ method: 'GET', url })).body).toBe('second');
    }
    // One of a list of tags that is the object's own deletes it; then it is gone (404, not 412).
    expect((await del(`${first}, ${second}`)).statusCode).toBe(204);
    expect((await svc.app.inject({ method: 'GET', url })).statusCode).toBe(404);
    expect((await del(second)).json()).toMatchObject({ code: 'OBJECT_NOT_FOUND', status: 404 });
    // `*`: whatever object is there.
    await put(url, 'third');
    expect((await del('*')).statusCode).toBe(204);
    expect((await svc.app.inject({ method: 'GET', url })).statusCode).toBe(404);
  });

  it('keeps an object replaced between its If-Match check and the delete (the store checks the ETag too)', async () => {
    const target = { bucket, key: 'tmp/raced.txt', folder: '' };
    const first = (await put(`/objects/${bucket}/tmp/raced.txt`, 'first')).json().etag as string;
    // A store whose HEAD answers the object as it was, then lets another writer replace it before the delete.
    const racing = Object.create(svc.store, {
      head: {
        value: async (...args: Parameters<typeof svc.store.head>) => {
          const head = await svc.store.head(...args);
          await put(`/objects/${bucket}/tmp/raced.txt`, 'second');
          return head;
        },
      },
    }) as typeof svc.store;
    await expect(deleteObject(racing, target, { ifMatch: first })).rejects.toMatchObject({ code: 'OBJECT_CHANGED' });
    expect((await svc.app.inject({ method: 'GET', url: `/objects/${bucket}/tmp/raced.txt` })).body).toBe('second');
  });

  it('answers a DELETE in a missing bucket with 404 BUCKET_NOT_FOUND, as GET and PUT do', async () => {
    const missing = uniqueBucket('gone');
    const del = await svc.app.inject({ method: 'DELETE', url: `/objects/${missing}/a.txt` });
    expect(del.statusCode).toBe(404);
    expect(del.headers['content-type']).toContain('application/problem+json');
    expect(del.json()).toMatchObject({ code: 'BUCKET_NOT_FOUND', status: 404 });
  });
});

describe('an object store that refuses the service (wrong credentials)', () => {
  it('answers 502 OBJECT_STORE_ERROR on upload, download, delete, list and bucket creation', async () => {
    const refused = await startService({ objectStore: { access_key_id: 'NOT-A-KEY', default_bucket: '' } });
    try {
      const calls = [
        refused.app.inject({ method: 'PUT', url: `/objects/${bucket}/refused.txt`, payload: 'x' }),
        refused.app.inject({ method: 'GET', url: `/objects/${bucket}/range.txt` }),
        refused.app.inject({ method: 'DELETE', url: `/objects/${bucket}/range.txt` }),
        refused.app.inject({ method: 'GET', url: `/objects/${bucket}/list` }),
        refused.app.inject({ method: 'POST', url: `/buckets/${uniqueBucket('refused')}` }),
      ];
      for (const res of await Promise.all(calls)) {
        expect(res.statusCode).toBe(502);
        expect(res.headers['content-type']).toContain('application/problem+json');
        expect(res.json()).toMatchObject({ code: 'OBJECT_STORE_ERROR', status: 502 });
      }
      const head = await refused.app.inject({ method: 'HEAD', url: `/objects/${bucket}/range.txt` });
      expect(head.statusCode).toBe(502);
      expect(head.body).toBe('');
    } finally {
      await refused.close();
    }
    // The object is still there: nothing was deleted through the refused store.
    const get = await rangeTxt('GET');
    expect(get.statusCode).toBe(200);
  });
});
