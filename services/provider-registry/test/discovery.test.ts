import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gpu, type Harness, register, startHarness } from './helpers.ts';

let h: Harness;
const ids: Record<string, string> = {};

const a100 = (vram: number) => gpu({ model_name: 'NVIDIA A100-SXM4', vram, architecture: 'Ampere' });
const h100 = () => gpu({ model_name: 'NVIDIA H100 PCIe', vram: 81559, architecture: 'Hopper' });
const rtx = (healthy = true) =>
  gpu({ model_name: 'NVIDIA GeForce RTX 4090', vram: 24564, architecture: 'Ada', is_healthy: healthy });

beforeAll(async () => {
  h = await startHarness({ nats: false });
  const fleet: [string, string, ReturnType<typeof gpu>[]][] = [
    ['p1', 'idle', [a100(81920), a100(81920)]],
    ['p2', 'busy', [a100(40960)]],
    ['p3', 'idle', [rtx(), rtx(), rtx(false), rtx()]],
    ['p4', 'idle', [h100(), a100(40960)]],
    ['p5', 'maintenance', Array.from({ length: 8 }, h100)],
  ];
  for (const [name, status, gpus] of fleet) {
    const p = await register(h.app, { name, status, gpus });
    ids[name] = p.id;
  }
});
afterAll(async () => {
  await h.close();
  await h.testDb.drop();
});

async function list(query: string) {
  const res = await h.app.inject({ method: 'GET', url: `/providers${query ? `?${query}` : ''}` });
  if (res.statusCode !== 200) throw new Error(`${res.statusCode} ${res.body}`);
  return res;
}
const names = async (query: string) => {
  const byId = Object.fromEntries(Object.entries(ids).map(([k, v]) => [v, k]));
  return (await list(query)).json().map((p: { id: string }) => byId[p.id]);
};

describe('GET /providers filters', () => {
  it.each([
    ['', ['p1', 'p2', 'p3', 'p4', 'p5']],
    ['status=idle', ['p1', 'p3', 'p4']],
    ['status=maintenance', ['p5']],
    ['status=offline', []],
    ['gpu_model=a100', ['p1', 'p2', 'p4']],
    ['gpu_model=A100', ['p1', 'p2', 'p4']],
    ['gpu_model=rtx%204090', ['p3']],
    ['gpu_model=%25', []],
    ['gpu_model=_', []],
    ['min_vram=80000', ['p1', 'p4', 'p5']],
    ['min_vram=0', ['p1', 'p2', 'p3', 'p4', 'p5']],
    ['architecture=hopper', ['p4', 'p5']],
    ['architecture=HOPPER', ['p4', 'p5']],
    ['architecture=hop', []],
    ['healthy_only=true', ['p1', 'p2', 'p4', 'p5']],
    ['healthy_only=false', ['p1', 'p2', 'p3', 'p4', 'p5']],
    ['min_gpus=2', ['p1', 'p3', 'p4', 'p5']],
    ['min_gpus=5', ['p5']],
  ])('%s', async (query, expected) => {
    expect(await names(query)).toEqual(expected);
  });

  it.each([
    // GPU conditions hold for the same GPUs: p4 has an 80 GB GPU and an A100, but no 80 GB A100.
    ['gpu_model=a100&min_vram=80000', ['p1']],
    ['gpu_model=a100&min_gpus=2', ['p1']],
    ['architecture=ampere&min_vram=40000&min_gpus=2', ['p1']],
    ['architecture=ada&min_gpus=4', ['p3']],
    ['architecture=ada&min_gpus=4&healthy_only=true', []],
    ['status=idle&architecture=ampere&healthy_only=true', ['p1', 'p4']],
    ['status=idle&gpu_model=h100', ['p4']],
    ['status=busy&min_vram=40000&gpu_model=a100', ['p2']],
    ['gpu_model=h100&min_gpus=8&status=maintenance', ['p5']],
    ['gpu_model=h100&min_gpus=9', []],
  ])('combines %s', async (query, expected) => {
    expect(await names(query)).toEqual(expected);
  });
});

describe('GET /providers ordering and pagination', () => {
  it.each([
    ['sort=-registered_at', ['p5', 'p4', 'p3', 'p2', 'p1']],
    ['sort=vram&status=idle', ['p3', 'p4', 'p1']],
    ['sort=-vram&gpu_model=a100', ['p1', 'p4', 'p2']],
  ])('%s', async (query, expected) => {
    expect(await names(query)).toEqual(expected);
  });

  it('breaks ties by id in the sort direction', async () => {
    // p1 and p4 both have two GPUs.
    const tie = [ids.p1, ids.p4].sort() as [string, string];
    const byId = Object.fromEntries(Object.entries(ids).map(([k, v]) => [v, k]));
    expect(await names('sort=gpu_count')).toEqual(['p2', byId[tie[0]], byId[tie[1]], 'p3', 'p5']);
    expect(await names('sort=-gpu_count')).toEqual(['p5', 'p3', byId[tie[1]], byId[tie[0]], 'p2']);
  });

  it('sorts by last_seen_at, which heartbeats move', async () => {
    await h.app.inject({ method: 'POST', url: `/providers/${ids.p2}/heartbeat` });
    await h.app.inject({ method: 'POST', url: `/providers/${ids.p1}/heartbeat` });
    const order = await names('sort=-last_seen_at');
    expect(order.slice(0, 2)).toEqual(['p1', 'p2']);
    expect((await names('sort=last_seen_at')).slice(-2)).toEqual(['p2', 'p1']);
  });

  it.each(['registered_at', '-registered_at', 'vram', '-vram', 'gpu_count', '-gpu_count', 'last_seen_at'])(
    'pages through every provider exactly once with sort=%s',
    async (sort) => {
      const all = await names(`sort=${sort}`);
      const seen: string[] = [];
      let url: string | undefined = `/providers?sort=${sort}&limit=2`;
      let pages = 0;
      while (url) {
        const res = await h.app.inject({ method: 'GET', url });
        expect(res.statusCode).toBe(200);
        const byId = Object.fromEntries(Object.entries(ids).map(([k, v]) => [v, k]));
        seen.push(...res.json().map((p: { id: string }) => byId[p.id]));
        const next = res.headers['x-next-cursor'] as string | undefined;
        if (next) {
          expect(res.headers.link).toBe(
            `</providers?sort=${encodeURIComponent(sort)}&limit=2&cursor=${next}>; rel="next"`,
          );
          url = `/providers?sort=${sort}&limit=2&cursor=${next}`;
        } else url = undefined;
        pages += 1;
      }
      expect(seen).toEqual(all);
      expect(pages).toBe(3);
    },
  );

  it('combines a cursor with filters', async () => {
    const first = await list('gpu_model=a100&limit=1');
    const cursor = first.headers['x-next-cursor'] as string;
    const second = await list(`gpu_model=a100&limit=5&cursor=${cursor}`);
    expect(second.json().map((p: { id: string }) => p.id)).toEqual([ids.p2, ids.p4]);
    expect(second.headers['x-next-cursor']).toBeUndefined();
  });
});

describe('GET /providers bad parameters', () => {
  it.each([
    ['status=sleeping', 'querystring.status'],
    ['min_vram=-1', 'querystring.min_vram'],
    ['min_vram=abc', 'querystring.min_vram'],
    ['min_vram=1.5', 'querystring.min_vram'],
    ['limit=0', 'querystring.limit'],
    ['limit=1001', 'querystring.limit'],
    ['healthy_only=maybe', 'querystring.healthy_only'],
    ['sort=name', 'querystring.sort'],
    ['min_gpus=0', 'querystring.min_gpus'],
    ['gpu_model=', 'querystring.gpu_model'],
  ])('%s is a 400 naming %s', async (query, path) => {
    const res = await h.app.inject({ method: 'GET', url: `/providers?${query}` });
    expect(res.statusCode).toBe(400);
    expect(res.headers['content-type']).toContain('application/problem+json');
    expect(res.json().errors.map((e: { path: string }) => e.path)).toContain(path);
  });

  it('rejects a forged cursor and a cursor made for another sort with 400 INVALID_CURSOR', async () => {
    const garbage = await h.app.inject({ method: 'GET', url: '/providers?cursor=bm90LWEtY3Vyc29y' });
    expect(garbage.statusCode).toBe(400);
    expect(garbage.json().code).toBe('INVALID_CURSOR');
    const injected = Buffer.from(JSON.stringify(['vram', "1'; drop table providers; --", ids.p1])).toString(
      'base64url',
    );
    const sqlish = await h.app.inject({ method: 'GET', url: `/providers?sort=vram&cursor=${injected}` });
    expect(sqlish.statusCode).toBe(400);
    const page = await list('sort=vram&limit=1');
    const other = await h.app.inject({
      method: 'GET',
      url: `/providers?sort=gpu_count&cursor=${page.headers['x-next-cursor']}`,
    });
    expect(other.statusCode).toBe(400);
    expect(other.json().detail).toContain('sort=vram');
  });

  it.each([
    ['registered_at', '0000-01-01T00:00:00.000000Z'],
    ['last_seen_at', '2026-13-45T99:00:00.000000Z'],
    ['-last_seen_at', '2026-02-30T00:00:00.000000Z'],
    ['-registered_at', '9999-12-31T00:00:00.000000Z'],
    ['vram', '99999999999999999999'],
  ])('answers a forged cursor for sort=%s at %s with 400 INVALID_CURSOR, not a database error', async (sort, value) => {
    const forged = Buffer.from(JSON.stringify([sort, value, ids.p1])).toString('base64url');
    const res = await h.app.inject({ method: 'GET', url: `/providers?sort=${sort}&cursor=${forged}` });
    expect(res.statusCode).toBe(400);
    expect(res.json().code).toBe('INVALID_CURSOR');
  });
});

describe('GET /providers page size', () => {
  it('returns 100 by default and at most 1000', async () => {
    const batch = Array.from({ length: 100 }, (_, i) => register(h.app, { owner_id: 'bulk', name: `bulk-${i}` }));
    await Promise.all(batch);
    const res = await list('');
    expect(res.json()).toHaveLength(100);
    expect(res.headers['x-next-cursor']).toBeDefined();
    const all = await list('limit=1000');
    expect(all.json()).toHaveLength(105);
    expect(all.headers['x-next-cursor']).toBeUndefined();
  });
});
