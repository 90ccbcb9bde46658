import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService, type TestService, uniqueBucket } from './helpers.ts';

let svc: TestService;
let bucket: string;
const keys = ['a.txt', 'data/one.csv', 'data/two.csv', 'data/deep/three.json', 'models/m.bin'];

beforeAll(async () => {
  svc = await startService();
  bucket = uniqueBucket('list');
  await svc.store.ensureBucket(bucket);
  for (const key of keys) {
    await svc.app.inject({ method: 'PUT', url: `/objects/${bucket}/${key}`, payload: key });
  }
});
afterAll(() => svc.close());

const list = (query = '') => svc.app.inject({ method: 'GET', url: `/objects/${bucket}/list${query}` });
const keysOf = (body: Array<{ key: string }>) => body.map((o) => o.key);

describe('GET /objects/{bucket}/list', () => {
  it('lists every object recursively by default, sorted by key, with ObjectInfo fields', async () => {
    const res = await list();
    expect(res.statusCode).toBe(200);
    expect(keysOf(res.json())).toEqual([...keys].sort());
    const first = res.json()[0];
    expect(first).toMatchObject({ key: 'a.txt', size: 5, is_prefix: false, content_type: 'text/plain' });
    expect(first.etag).toMatch(/^"[0-9a-f]{32}"$/);
    expect(Date.parse(first.last_modified)).not.toBeNaN();
  });

  it('filters by prefix', async () => {
    expect(keysOf((await list('?prefix=data/')).json())).toEqual([
      'data/deep/three.json',
      'data/one.csv',
      'data/two.csv',
    ]);
  });

  it('lists one level with recursive=false, returning common prefixes as entries', async () => {
    const top = (await list('?recursive=false')).json();
    expect(keysOf(top)).toEqual(['a.txt', 'data/', 'models/']);
    expect(top.find((o: { key: string }) => o.key === 'data/')).toMatchObject({ is_prefix: true, size: 0 });
    const data = (await list('?recursive=false&prefix=data/')).json();
    expect(keysOf(data)).toEqual(['data/deep/', 'data/one.csv', 'data/two.csv']);
  });

  it('pages with limit and start_after, announcing the next page in X-Next-Start-After', async () => {
    const page1 = await list('?limit=2');
    expect(keysOf(page1.json())).toEqual(['a.txt', 'data/deep/three.json']);
    expect(page1.headers['x-next-start-after']).toBe('data/deep/three.json');
    const page2 = await list(`?limit=10&start_after=${encodeURIComponent('data/deep/three.json')}`);
    expect(keysOf(page2.json())).toEqual(['data/one.csv', 'data/two.csv', 'models/m.bin']);
    expect(page2.headers['x-next-start-after']).toBeUndefined();
  });

  it('pages past a key a header cannot carry (日本, é) by its cursor alone, never a 500', async () => {
    const other = uniqueBucket('list-utf8');
    await svc.store.ensureBucket(other);
    const names = ['é1.txt', 'é2.txt', '日本1.txt', '日本2.txt'];
    for (const key of names) {
      await svc.app.inject({ method: 'PUT', url: `/objects/${other}/${encodeURIComponent(key)}`, payload: key });
    }
    const seen: string[] = [];
    const get = (url: string) => svc.app.inject({ method: 'GET', url });
    let url: string | undefined = `/objects/${other}/list?limit=1`;
    while (url) {
      const page = await get(url);
      expect(page.statusCode, page.body).toBe(200);
      expect(page.headers['x-next-start-after']).toBeUndefined();
      seen.push(...keysOf(page.json()));
      const cursor = page.headers['x-next-cursor'];
      url = cursor ? `/objects/${other}/list?limit=1&cursor=${encodeURIComponent(String(cursor))}` : undefined;
    }
    expect(seen).toEqual(names);
  });

  it('pages a one-level listing past a folder entry (start_after = the folder)', async () => {
    const page1 = await list('?recursive=false&limit=2');
    expect(keysOf(page1.json())).toEqual(['a.txt', 'data/']);
    expect(page1.headers['x-next-start-after']).toBe('data/');
    const page2 = await list('?recursive=false&limit=2&start_after=data%2F');
    expect(keysOf(page2.json())).toEqual(['models/']);
    expect(page2.headers['x-next-start-after']).toBeUndefined();
    // A key inside a folder lies in that folder's entry: the listing goes on after the whole folder.
    const inside = await list('?recursive=false&start_after=data%2Fone.csv');
    expect(keysOf(inside.json())).toEqual(['models/']);
  });

  it('pages with limit and cursor, announcing the next page in X-Next-Cursor and Link', async () => {
    const page1 = await list('?limit=2&recursive=false');
    expect(keysOf(page1.json())).toEqual(['a.txt', 'data/']);
    const cursor = String(page1.headers['x-next-cursor']);
    expect(cursor).toMatch(/^[A-Za-z0-9_-]+$/);
    expect(page1.headers.link).toBe(`</objects/${bucket}/list?limit=2&recursive=false&cursor=${cursor}>; rel="next"`);
    // The deprecated header names the same position.
    expect(page1.headers['x-next-start-after']).toBe('data/');
    const page2 = await list(`?limit=2&recursive=false&cursor=${cursor}`);
    expect(keysOf(page2.json())).toEqual(['models/']);
    expect(page2.headers['x-next-cursor']).toBeUndefined();
    expect(page2.headers.link).toBeUndefined();
  });

  it('takes the cursor over start_after, and refuses a cursor it did not write with 400 INVALID_CURSOR', async () => {
    const page1 = await list('?limit=1');
    const cursor = String(page1.headers['x-next-cursor']);
    const both = await list(`?limit=1&start_after=models%2Fm.bin&cursor=${cursor}`);
    expect(keysOf(both.json())).toEqual(['data/deep/three.json']);
    for (const forged of ['not-a-cursor', Buffer.from('[1]').toString('base64url'), 'a'.repeat(2000)]) {
      const res = await list(`?cursor=${forged}`);
      expect(res.statusCode, forged).toBe(400);
      expect(res.json().code, forged).toBe(forged.length > 1024 ? 'VALIDATION_ERROR' : 'INVALID_CURSOR');
    }
  });

  it("gives each object's stored content type (one-level: folders have none)", async () => {
    const types = (res: { json(): Array<{ content_type: string | null }> }) => res.json().map((o) => o.content_type);
    expect(types(await list('?prefix=data/'))).toEqual(['application/json', 'text/csv', 'text/csv']);
    expect(types(await list('?metadata=true&prefix=data/'))).toEqual(['application/json', 'text/csv', 'text/csv']);
    expect(types(await list('?recursive=false'))).toEqual(['text/plain', null, null]);
  });

  it('gives the content type the object was uploaded with, not a guess from its key', async () => {
    const put = await svc.app.inject({
      method: 'PUT',
      url: `/objects/${bucket}/typed/report.txt`,
      payload: '{}',
      headers: { 'content-type': 'application/vnd.example+json' },
    });
    expect(put.statusCode).toBe(201);
    const listed = (await list('?prefix=typed/')).json();
    expect(listed).toEqual([
      expect.objectContaining({ key: 'typed/report.txt', content_type: 'application/vnd.example+json' }),
    ]);
    await svc.app.inject({ method: 'DELETE', url: `/objects/${bucket}/typed/report.txt` });
  });

  it('leaves content types null with metadata=false', async () => {
    const res = (await list('?metadata=false&prefix=data/')).json();
    expect(res.map((o: { content_type: string | null }) => o.content_type)).toEqual([null, null, null]);
    expect(res.map((o: { key: string }) => o.key)).toEqual(['data/deep/three.json', 'data/one.csv', 'data/two.csv']);
  });

  it('answers bad query values with 400', async () => {
    for (const q of [
      '?recursive=maybe',
      '?limit=0',
      '?limit=1001',
      '?limit=1e2',
      '?limit=abc',
      '?prefix=a/../b',
      `?prefix=${'a'.repeat(1025)}`,
    ]) {
      const res = await list(q);
      expect(res.statusCode, q).toBe(400);
      expect(res.json().code).toBe('VALIDATION_ERROR');
    }
  });

  it('answers a missing bucket with 404 BUCKET_NOT_FOUND', async () => {
    const res = await svc.app.inject({ method: 'GET', url: `/objects/${uniqueBucket('none')}/list` });
    expect(res.statusCode).toBe(404);
    expect(res.json().code).toBe('BUCKET_NOT_FOUND');
  });
});

describe('paging through a level of files and folders', () => {
  let mixed: string;
  // Folders next to files that sort right after them ("b0.txt" follows every "b/..." key), at two depths.
  const mixedKeys = [
    'a.txt',
    'b/1.txt',
    'b/2.txt',
    'b/deep/3.txt',
    'b/deep/4.txt',
    'b0.txt',
    'c/x.txt',
    'd.txt',
    'e/f/g.txt',
    'e/h.txt',
    'z.txt',
  ];

  beforeAll(async () => {
    mixed = uniqueBucket('paging');
    await svc.store.ensureBucket(mixed);
    for (const key of mixedKeys) {
      await svc.app.inject({ method: 'PUT', url: `/objects/${mixed}/${key}`, payload: key });
    }
  });

  /** Follows X-Next-Cursor to the end; stops (and fails) after 50 pages rather than loop for ever. */
  async function pageByCursor(query: string, limit: number): Promise<string[]> {
    const seen: string[] = [];
    let url = `/objects/${mixed}/list?limit=${limit}${query}`;
    for (let page = 0; page < 50; page++) {
      const res = await svc.app.inject({ method: 'GET', url });
      expect(res.statusCode).toBe(200);
      seen.push(...keysOf(res.json()));
      const link = res.headers.link;
      if (link === undefined) return seen;
      url = /^<([^>]+)>; rel="next"$/.exec(String(link))![1]!;
    }
    throw new Error(`still paging after 50 pages: ${seen.join(', ')}`);
  }

  it.each([1, 2])(
    'follows the Link of a one-level listing to every entry exactly once with limit %i',
    async (limit) => {
      expect(await pageByCursor('&recursive=false', limit)).toEqual([
        'a.txt',
        'b/',
        'b0.txt',
        'c/',
        'd.txt',
        'e/',
        'z.txt',
      ]);
      expect(await pageByCursor('', limit)).toEqual(mixedKeys);
    },
  );

  /** Follows X-Next-Start-After to the end; stops (and fails) after 50 pages rather than loop for ever. */
  async function pageThrough(query: string, limit: number): Promise<string[]> {
    const seen: string[] = [];
    let startAfter: string | undefined;
    for (let page = 0; page < 50; page++) {
      const after = startAfter === undefined ? '' : `&start_after=${encodeURIComponent(startAfter)}`;
      const res = await svc.app.inject({ method: 'GET', url: `/objects/${mixed}/list?limit=${limit}${query}${after}` });
      expect(res.statusCode).toBe(200);
      const entries = keysOf(res.json());
      expect(entries.length).toBeLessThanOrEqual(limit);
      seen.push(...entries);
      const next = res.headers['x-next-start-after'];
      if (next === undefined) return seen;
      expect(next).toBe(entries[entries.length - 1]);
      startAfter = String(next);
    }
    throw new Error(`still paging after 50 pages: ${seen.join(', ')}`);
  }

  it.each([1, 2])('collects every entry of the top level exactly once with limit %i', async (limit) => {
    expect(await pageThrough('&recursive=false', limit)).toEqual([
      'a.txt',
      'b/',
      'b0.txt',
      'c/',
      'd.txt',
      'e/',
      'z.txt',
    ]);
  });

  it.each([1, 2])('collects every entry of a folder level exactly once with limit %i', async (limit) => {
    expect(await pageThrough('&recursive=false&prefix=b%2F', limit)).toEqual(['b/1.txt', 'b/2.txt', 'b/deep/']);
    expect(await pageThrough('&recursive=false&prefix=e%2F', limit)).toEqual(['e/f/', 'e/h.txt']);
  });

  it.each([1, 2])('collects every key of a recursive listing exactly once with limit %i', async (limit) => {
    expect(await pageThrough('', limit)).toEqual(mixedKeys);
  });
});

describe('a one-level listing of folders that hold only folders', () => {
  // Every key two or more folders deep, as in the default bucket (`users/{id}/...`): no object at the top level.
  const deepKeys = ['users/u1/a.txt', 'users/u2/docs/b.txt', 'x/y/z/c.txt', 'x/y/d.txt'];
  let deep: string;

  beforeAll(async () => {
    deep = uniqueBucket('deep');
    await svc.store.ensureBucket(deep);
    for (const key of deepKeys) {
      expect((await svc.app.inject({ method: 'PUT', url: `/objects/${deep}/${key}`, payload: key })).statusCode).toBe(
        201,
      );
    }
  });

  const level = async (query: string) => {
    const res = await svc.app.inject({ method: 'GET', url: `/objects/${deep}/list?recursive=false${query}` });
    expect(res.statusCode).toBe(200);
    return keysOf(res.json());
  };

  it('lists the top level of the bucket (no prefix): each folder once', async () => {
    expect(await level('')).toEqual(['users/', 'x/']);
  });

  it('lists a level below the top whose folders hold only folders', async () => {
    expect(await level('&prefix=users%2F')).toEqual(['users/u1/', 'users/u2/']);
    expect(await level('&prefix=x%2F')).toEqual(['x/y/']);
    expect(await level('&prefix=x%2Fy%2F')).toEqual(['x/y/d.txt', 'x/y/z/']);
    expect(await level('&prefix=us')).toEqual(['users/']);
  });

  it('pages through the top level one entry at a time', async () => {
    const first = await svc.app.inject({ method: 'GET', url: `/objects/${deep}/list?recursive=false&limit=1` });
    expect(keysOf(first.json())).toEqual(['users/']);
    const cursor = String(first.headers['x-next-cursor']);
    const second = await svc.app.inject({
      method: 'GET',
      url: `/objects/${deep}/list?recursive=false&limit=1&cursor=${cursor}`,
    });
    expect(keysOf(second.json())).toEqual(['x/']);
    expect(second.headers['x-next-cursor']).toBeUndefined();
  });

  it("lists the default bucket's top level (users/) for an admin", async () => {
    await svc.app.inject({
      method: 'PUT',
      url: `/objects/${svc.config.object_store.default_bucket}/users/u9/n.txt`,
      payload: 'n',
    });
    const res = await svc.app.inject({ method: 'GET', url: '/objects/list?recursive=false' });
    expect(res.statusCode).toBe(200);
    expect(keysOf(res.json())).toEqual(['users/']);
  });
});
