/**
 * Downloads that skip the relay: `GET /objects/...?redirect=true` answers 307 to a presigned GET URL of the object at
 * the store, after the same access checks as a download, and plain curl following the redirect gets the bytes.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { type Caller, uninjected } from '@gpu/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService, type TestService, uniqueBucket } from './helpers.ts';

const run = promisify(execFile);
let svc: TestService;
let bucket: string;
let owner: Caller;
let stranger: Caller;
let dir: string;

const as = (caller: Caller, method: 'GET' | 'PUT' | 'POST', url: string, payload?: string) =>
  uninjected(svc.app)({ method, url, payload, headers: caller.headers });

/** curl, with the service's token, answering with the status it ended on and the bytes it saved. */
async function curl(args: string[], caller: Caller): Promise<{ status: number; body: string }> {
  const out = path.join(dir, `out-${Math.random().toString(36).slice(2)}`);
  const { stdout } = await run('curl', [
    '-s',
    '-o',
    out,
    '-w',
    '%{http_code}',
    '-H',
    `Authorization: ${caller.headers.authorization}`,
    ...args,
  ]);
  return { status: Number(stdout), body: await readFile(out, 'utf8').catch(() => '') };
}

beforeAll(async () => {
  svc = await startService({ listen: true });
  owner = await svc.issuer.user(['renter']);
  stranger = await svc.issuer.user(['renter']);
  bucket = uniqueBucket('redirect');
  expect((await as(owner, 'POST', `/buckets/${bucket}`)).statusCode).toBe(201);
  expect((await as(owner, 'PUT', `/objects/${bucket}/files/data.txt`, 'the bytes of data.txt')).statusCode).toBe(201);
  dir = await mkdtemp(path.join(tmpdir(), 'redirect-'));
});
afterAll(() => svc.close());

describe('GET /objects/{bucket}/{key}?redirect=true', () => {
  it('answers 307 to a presigned GET URL of the object at the store, not to be cached', async () => {
    const res = await as(owner, 'GET', `/objects/${bucket}/files/data.txt?redirect=true`);
    expect(res.statusCode).toBe(307);
    expect(res.headers['cache-control']).toBe('no-store');
    expect(res.body).toBe('');
    const location = new URL(String(res.headers.location));
    expect(`${location.origin}${location.pathname}`).toBe(
      `${svc.config.object_store.endpoint}/${bucket}/files/data.txt`,
    );
    expect(location.searchParams.get('X-Amz-Expires')).toBe('300');
    const direct = await fetch(location);
    expect(direct.status).toBe(200);
    expect(await direct.text()).toBe('the bytes of data.txt');
  });

  it('is followed by plain curl to the bytes (curl -L), by a Range request to the range, and by fetch', async () => {
    const url = `${svc.url}/objects/${bucket}/files/data.txt?redirect=true`;
    expect(await curl(['-L', url], owner)).toEqual({ status: 200, body: 'the bytes of data.txt' });
    expect(await curl(['-L', '-r', '4-8', url], owner)).toEqual({ status: 206, body: 'bytes' });
    // So does fetch (it drops the service's Authorization on the way to another origin, as S3 needs).
    const followed = await fetch(url, { headers: owner.headers });
    expect(followed.status).toBe(200);
    expect(await followed.text()).toBe('the bytes of data.txt');
    // Without -L, curl stops at the redirect.
    expect((await curl([url], owner)).status).toBe(307);
  });

  it('relays as before without redirect, or with redirect=false', async () => {
    for (const q of ['', '?redirect=false']) {
      const res = await as(owner, 'GET', `/objects/${bucket}/files/data.txt${q}`);
      expect(res.statusCode, q).toBe(200);
      expect(res.body, q).toBe('the bytes of data.txt');
    }
  });

  it("refuses someone else's bucket (403 BUCKET_NOT_OWNED) with no Location, as a download does", async () => {
    const res = await as(stranger, 'GET', `/objects/${bucket}/files/data.txt?redirect=true`);
    expect(res.statusCode).toBe(403);
    expect(res.json().code).toBe('BUCKET_NOT_OWNED');
    expect(res.headers.location).toBeUndefined();
    const anonymous = await uninjected(svc.app)({ url: `/objects/${bucket}/files/data.txt?redirect=true` });
    expect(anonymous.statusCode).toBe(401);
    expect(anonymous.headers.location).toBeUndefined();
  });

  it('answers a missing object 404 OBJECT_NOT_FOUND and a missing bucket 404 BUCKET_NOT_FOUND', async () => {
    const missing = await as(owner, 'GET', `/objects/${bucket}/files/none.txt?redirect=true`);
    expect(missing.statusCode).toBe(404);
    expect(missing.json().code).toBe('OBJECT_NOT_FOUND');
    const admin = await svc.issuer.user(['admin']);
    const noBucket = await as(admin, 'GET', `/objects/${uniqueBucket('none')}/x.txt?redirect=true`);
    expect(noBucket.statusCode).toBe(404);
    expect(noBucket.json().code).toBe('BUCKET_NOT_FOUND');
  });

  it('answers a bad redirect value with 400', async () => {
    const res = await as(owner, 'GET', `/objects/${bucket}/files/data.txt?redirect=maybe`);
    expect(res.statusCode).toBe(400);
    expect(res.json().code).toBe('VALIDATION_ERROR');
  });
});

describe('GET /objects/{key}?redirect=true (default bucket)', () => {
  it('redirects a user to the object in their own folder, and curl -L fetches it', async () => {
    expect((await as(stranger, 'PUT', '/objects/mine.txt', 'in my folder')).statusCode).toBe(201);
    const res = await as(stranger, 'GET', '/objects/mine.txt?redirect=true');
    expect(res.statusCode).toBe(307);
    expect(new URL(String(res.headers.location)).pathname).toBe(
      `/${svc.config.object_store.default_bucket}/users/${stranger.id}/mine.txt`,
    );
    expect(await curl(['-L', `${svc.url}/objects/mine.txt?redirect=true`], stranger)).toEqual({
      status: 200,
      body: 'in my folder',
    });
    // Another user's same name is another (missing) object.
    expect((await as(owner, 'GET', '/objects/mine.txt?redirect=true')).statusCode).toBe(404);
  });
});
