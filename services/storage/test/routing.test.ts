import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService, type TestService, uniqueBucket } from './helpers.ts';

let svc: TestService;
let bucket: string;
let defaultBucket: string;

beforeAll(async () => {
  svc = await startService();
  bucket = uniqueBucket('named');
  defaultBucket = svc.config.object_store.default_bucket;
  await svc.store.ensureBucket(bucket);
});
afterAll(() => svc.close());

const req = (method: 'GET' | 'PUT' | 'HEAD' | 'DELETE', url: string, payload?: string) =>
  svc.app.inject({ method, url, payload });

describe('default-bucket routes', () => {
  it('upload, download, head and delete one-segment keys in the default bucket', async () => {
    const up = await req('PUT', '/objects/notes.txt', 'default!');
    expect(up.statusCode).toBe(201);
    expect(up.json()).toMatchObject({ key: 'notes.txt', content_type: 'text/plain' });
    // The same object through the bucket-named route proves where it went.
    const named = await req('GET', `/objects/${defaultBucket}/notes.txt`);
    expect(named.body).toBe('default!');
    expect((await req('GET', '/objects/notes.txt')).body).toBe('default!');
    expect((await req('HEAD', '/objects/notes.txt')).headers['content-length']).toBe('8');
    expect((await req('DELETE', '/objects/notes.txt')).statusCode).toBe(204);
    expect((await req('GET', '/objects/notes.txt')).statusCode).toBe(404);
  });

  it('does not take a one-segment key for an extension: /objects/html is application/octet-stream', async () => {
    const up = await req('PUT', '/objects/html', '<p>not guessed</p>');
    expect(up.statusCode).toBe(201);
    expect(up.json()).toMatchObject({ key: 'html', content_type: 'application/octet-stream' });
    expect((await req('GET', '/objects/html')).headers['content-type']).toBe('application/octet-stream');
    expect((await req('PUT', '/objects/page.html', '<p>guessed</p>')).json().content_type).toBe('text/html');
  });

  it('GET /objects/list lists the default bucket', async () => {
    await req('PUT', '/objects/one.txt', '1');
    const res = await req('GET', '/objects/list');
    expect(res.statusCode).toBe(200);
    expect(res.json().map((o: { key: string }) => o.key)).toContain('one.txt');
  });

  it('POST /presigned-url/{key} signs for the default bucket', async () => {
    const res = await svc.app.inject({ method: 'POST', url: '/presigned-url/one.txt', payload: { method: 'GET' } });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ bucket: defaultBucket, key: 'one.txt', method: 'GET' });
  });

  it('answers 404 DEFAULT_BUCKET_NOT_CONFIGURED when no default bucket is configured', async () => {
    const bare = await startService({ objectStore: { default_bucket: '' } });
    try {
      const res = await bare.app.inject({ method: 'GET', url: '/objects/x.txt' });
      expect(res.statusCode).toBe(404);
      expect(res.json().code).toBe('DEFAULT_BUCKET_NOT_CONFIGURED');
      const list = await bare.app.inject({ method: 'GET', url: '/objects/list' });
      expect(list.json().code).toBe('DEFAULT_BUCKET_NOT_CONFIGURED');
    } finally {
      await bare.close();
    }
  });
});

describe('path resolution rule', () => {
  it('takes the first of two or more segments as the bucket', async () => {
    await req('PUT', `/objects/${bucket}/dir/file.txt`, 'named');
    const listed = await req('GET', `/objects/${bucket}/list`);
    expect(listed.json().map((o: { key: string }) => o.key)).toEqual(['dir/file.txt']);
    // Not in the default bucket.
    const inDefault = await req('GET', `/objects/${defaultBucket}/${bucket}/dir/file.txt`);
    expect(inDefault.statusCode).toBe(404);
  });

  it('lets the literal "list" win on GET, while PUT/HEAD/DELETE of a key named "list" still work', async () => {
    const up = await req('PUT', `/objects/${bucket}/list`, 'i am an object called list');
    expect(up.statusCode).toBe(201);
    expect(up.json().key).toBe('list');
    expect((await req('HEAD', `/objects/${bucket}/list`)).headers['content-length']).toBe('26');
    const get = await req('GET', `/objects/${bucket}/list`);
    expect(Array.isArray(get.json())).toBe(true);
    expect(get.json().map((o: { key: string }) => o.key)).toContain('list');
    expect((await req('DELETE', `/objects/${bucket}/list`)).statusCode).toBe(204);
  });

  it('validates the bucket segment of a two-segment path', async () => {
    const res = await req('GET', '/objects/Not_A_Bucket/file.txt');
    expect(res.statusCode).toBe(400);
    expect(res.json().code).toBe('VALIDATION_ERROR');
  });
});
