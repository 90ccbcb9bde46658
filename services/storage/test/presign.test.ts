import { execFile } from 'node:child_process';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openTestCatalog, startService, type TestService, uniqueBucket } from './helpers.ts';

const run = promisify(execFile);
let svc: TestService;
let bucket: string;
let dir: string;

beforeAll(async () => {
  svc = await startService();
  bucket = uniqueBucket('presign');
  await svc.store.ensureBucket(bucket);
  dir = await mkdtemp(path.join(tmpdir(), 'presign-'));
});
afterAll(() => svc.close());

const presign = (key: string, body: unknown) =>
  svc.app.inject({ method: 'POST', url: `/presigned-url/${bucket}/${key}`, payload: body as object });

/** curl, answering with the HTTP status it saw. */
async function curl(args: string[], output = '/dev/null'): Promise<number> {
  const { stdout } = await run('curl', ['-s', '-o', output, '-w', '%{http_code}', ...args]);
  return Number(stdout);
}

describe('POST /presigned-url/{bucket}/{key}', () => {
  it('gives a PUT URL that accepts an upload with plain curl, readable through the service', async () => {
    const res = await presign('uploads/from-curl.txt', { method: 'PUT', expiry: '10m' });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body).toMatchObject({ method: 'PUT', key: 'uploads/from-curl.txt', bucket });
    expect(body.url).toContain('X-Amz-Expires=600');
    const file = path.join(dir, 'up.txt');
    await writeFile(file, 'uploaded by curl');
    expect(await curl(['-X', 'PUT', '--upload-file', file, body.url])).toBe(200);
    const get = await svc.app.inject({ method: 'GET', url: `/objects/${bucket}/uploads/from-curl.txt` });
    expect(get.statusCode).toBe(200);
    expect(get.body).toBe('uploaded by curl');
  });

  it('gives a GET URL that downloads with plain curl', async () => {
    await svc.app.inject({ method: 'PUT', url: `/objects/${bucket}/dl.bin`, payload: Buffer.from('download me') });
    const { url } = (await presign('dl.bin', { method: 'GET' })).json();
    const out = path.join(dir, 'dl.bin');
    expect(await curl([url], out)).toBe(200);
    expect(await readFile(out, 'utf8')).toBe('download me');
  });

  it('gives a GET URL that neither overwrites nor deletes its object (403 from the store), and a PUT URL that does not read', async () => {
    await svc.app.inject({ method: 'PUT', url: `/objects/${bucket}/guarded.txt`, payload: Buffer.from('guarded') });
    const { url } = (await presign('guarded.txt', { method: 'GET' })).json();
    const file = path.join(dir, 'other.txt');
    await writeFile(file, 'overwritten');
    expect(await curl(['-X', 'PUT', '--upload-file', file, url])).toBe(403);
    expect(await curl(['-X', 'DELETE', url])).toBe(403);
    const get = await svc.app.inject({ method: 'GET', url: `/objects/${bucket}/guarded.txt` });
    expect(get.statusCode).toBe(200);
    expect(get.body).toBe('guarded');
    const put = (await presign('guarded.txt', { method: 'PUT' })).json();
    expect(await curl([put.url])).toBe(403);
    expect(await curl([url.replace(/X-Amz-Signature=[0-9a-f]{4}/, 'X-Amz-Signature=0000')])).toBe(403);
  });

  it('defaults the expiry to 15 minutes', async () => {
    const before = Date.now();
    const body = (await presign('dl.bin', { method: 'GET' })).json();
    const after = Date.now();
    expect(body.url).toContain('X-Amz-Expires=900');
    // Signed between the two (its time in whole seconds).
    const expiresAt = Date.parse(body.expires_at);
    expect(expiresAt - before).toBeGreaterThanOrEqual(899_000);
    expect(expiresAt - after).toBeLessThanOrEqual(900_000);
  });

  it('accepts compound durations such as 1h30m', async () => {
    const body = (await presign('dl.bin', { method: 'GET', expiry: '1h30m' })).json();
    expect(body.url).toContain('X-Amz-Expires=5400');
  });

  it('refuses an expired URL', async () => {
    const { url } = (await presign('dl.bin', { method: 'GET', expiry: '1s' })).json();
    await new Promise((r) => setTimeout(r, 2100));
    expect(await curl([url])).toBe(403);
  });

  it.each([
    [{ method: 'DELETE' }, 'body.method'],
    [{}, 'body.method'],
    [{ method: 'GET', expiry: 'soon' }, 'body.expiry'],
    [{ method: 'GET', expiry: '15' }, 'body.expiry'],
    [{ method: 'GET', expiry: '0s' }, 'body.expiry'],
    [{ method: 'GET', expiry: '8d' }, 'body.expiry'],
    [{ method: 'GET', expiry: 30 }, 'body.expiry'],
  ])('answers %j with 400 naming %s', async (body, field) => {
    const res = await presign('dl.bin', body);
    expect(res.statusCode).toBe(400);
    expect(res.json().code).toBe('VALIDATION_ERROR');
    expect(res.json().errors.map((e: { path: string }) => e.path)).toContain(field);
  });

  it('answers malformed JSON with 400', async () => {
    const res = await svc.app.inject({
      method: 'POST',
      url: `/presigned-url/${bucket}/x`,
      payload: '{"method":',
      headers: { 'content-type': 'application/json' },
    });
    expect(res.statusCode).toBe(400);
    expect(res.json().code).toBe('MALFORMED_JSON');
  });

  it('signs URLs for the public endpoint when one is configured', async () => {
    const pub = await startService({ objectStore: { public_endpoint: 'https://files.example.com' } });
    try {
      const res = await pub.app.inject({
        method: 'POST',
        url: `/presigned-url/${bucket}/dl.bin`,
        payload: { method: 'GET' },
      });
      expect(new URL(res.json().url).origin).toBe('https://files.example.com');
      expect(res.json().url).toContain(`/${bucket}/dl.bin`);
    } finally {
      await pub.close();
    }
  });
});

describe('write URLs a user has open', () => {
  it('are at most max_open_write_urls keys: one key again is always given, another is 409 until they expire', async () => {
    const limited = await startService({ objectStore: { max_open_write_urls: 3 } });
    const { database } = await openTestCatalog();
    try {
      const user = await limited.issuer.user(['renter']);
      const ask = (key: string, method = 'PUT', headers: Record<string, string> = user.headers) =>
        limited.app.inject({
          method: 'POST',
          url: `/presigned-url/${encodeURIComponent(key)}`,
          headers,
          payload: { method, expiry: '1h' },
        });
      for (const key of ['a.bin', 'b.bin', 'c.bin']) expect((await ask(key)).statusCode).toBe(200);
      // The same key again: its one note moves on, never a row a URL.
      for (let i = 0; i < 5; i++) expect((await ask('a.bin')).statusCode).toBe(200);
      const notes = await database.db
        .selectFrom('catalog_expected_writes')
        .select('key')
        .where('key', '=', `users/${user.id}/a.bin`)
        .execute();
      expect(notes).toHaveLength(1);
      const refused = await ask('d.bin');
      expect(refused.statusCode, refused.body).toBe(409);
      expect(refused.json()).toMatchObject({ code: 'TOO_MANY_WRITE_URLS' });
      // Reading is not bounded, nor is another user, nor an admin.
      expect((await ask('d.bin', 'GET')).statusCode).toBe(200);
      const other = await limited.issuer.user(['renter']);
      expect((await ask('d.bin', 'PUT', other.headers)).statusCode).toBe(200);
      expect((await ask(`users/${user.id}/e.bin`, 'PUT', limited.auth)).statusCode).toBe(200);
      // Asked for at once, a fresh user's URLs pass the bound no more than one by one.
      const racer = await limited.issuer.user(['renter']);
      const answers = await Promise.all(
        ['1', '2', '3', '4', '5', '6'].map((n) => ask(`race-${n}.bin`, 'PUT', racer.headers)),
      );
      expect(answers.map((r) => r.statusCode).sort()).toEqual([200, 200, 200, 409, 409, 409]);
    } finally {
      await database.close();
      await limited.close();
    }
  });
});
