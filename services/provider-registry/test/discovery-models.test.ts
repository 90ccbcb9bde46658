/**
 * Discovery with a `gpu_model` term under a sort key fixed at registration
 * walks `provider_models` (db/discovery-repository.ts). These tests hold it to
 * a reference implementation of the filters and the order, page by page, and
 * check that the keys follow every write of a provider.
 */
import { migrateToLatest, openDatabase } from '@gpu/common';
import { createTestDatabase } from '@gpu/common/testing';
import { type Kysely, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listProviders, ModelNames } from '../src/db/discovery-repository.ts';
import * as createProviders from '../src/db/migrations/20250101000000_create_providers.ts';
import { migrations } from '../src/db/migrations/index.ts';
import { gpu, type Harness, register, startHarness } from './helpers.ts';

let h: Harness;

beforeAll(async () => {
  h = await startHarness({ nats: false });
});
afterAll(async () => {
  await h.close();
  await h.testDb.drop();
});

interface Listed {
  id: string;
  status: string;
  gpus: { model_name: string; vram: number; architecture: string | null; is_healthy: boolean }[];
}

async function list(query: string): Promise<{ providers: Listed[]; next?: string }> {
  const res = await h.app.inject({ method: 'GET', url: `/providers?${query}` });
  if (res.statusCode !== 200) throw new Error(`${query}: ${res.statusCode} ${res.body}`);
  return { providers: res.json(), next: res.headers['x-next-cursor'] as string | undefined };
}

const ids = async (query: string) => (await list(query)).providers.map((p) => p.id);

/** Every page of `query`, following X-Next-Cursor. */
async function allPages(query: string): Promise<string[]> {
  const seen: string[] = [];
  let cursor: string | undefined;
  do {
    const page = await list(`${query}${cursor ? `&cursor=${cursor}` : ''}`);
    seen.push(...page.providers.map((p) => p.id));
    cursor = page.next;
  } while (cursor);
  return seen;
}

describe('GET /providers by GPU model', () => {
  const MODELS: [string, number, string][] = [
    ['NVIDIA A100-SXM4-40GB', 40960, 'Ampere'],
    ['NVIDIA A100-SXM4-80GB', 81920, 'Ampere'],
    ['NVIDIA A100 PCIe', 40960, 'Ampere'],
    ['NVIDIA H100 PCIe', 81559, 'Hopper'],
    ['NVIDIA GeForce RTX 4090', 24564, 'Ada'],
    ['AMD Instinct MI250X', 131072, 'CDNA2'],
  ];
  /** Registration order, as the default sort lists it. */
  let fleet: Listed[] = [];

  beforeAll(async () => {
    // A deterministic mix: many machines carry several models, so a term often matches one machine twice.
    let seed = 7;
    const next = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return Math.floor((seed / 2 ** 31) * n);
    };
    for (let i = 0; i < 36; i++) {
      const gpus = Array.from({ length: 1 + next(4) }, () => {
        const [model_name, vram, architecture] = MODELS[next(MODELS.length)]!;
        return gpu({ model_name, vram, architecture, is_healthy: next(10) > 0 });
      });
      await register(h.app, { owner_id: 'fleet', name: `m-${i}`, status: ['idle', 'idle', 'busy'][next(3)], gpus });
    }
    fleet = (await list('limit=1000')).providers;
  });

  /** The reference: the documented filter semantics, and sort key then id, in JS. */
  function expected(query: string): string[] {
    const q = new URLSearchParams(query);
    const term = q.get('gpu_model')?.toLowerCase() ?? '';
    const minVram = Number(q.get('min_vram') ?? 0);
    const minGpus = Number(q.get('min_gpus') ?? 1);
    const sort = q.get('sort') ?? 'registered_at';
    const key = sort.replace('-', '');
    const sign = sort.startsWith('-') ? -1 : 1;
    const value = (p: Listed) =>
      key === 'vram' ? Math.max(...p.gpus.map((g) => g.vram)) : key === 'gpu_count' ? p.gpus.length : fleet.indexOf(p);
    return fleet
      .filter((p) => !q.get('status') || p.status === q.get('status'))
      .filter((p) => q.get('healthy_only') !== 'true' || p.gpus.every((g) => g.is_healthy))
      .filter(
        (p) => p.gpus.filter((g) => g.model_name.toLowerCase().includes(term) && g.vram >= minVram).length >= minGpus,
      )
      .sort((a, b) => sign * (value(a) - value(b) || (a.id < b.id ? -1 : 1)))
      .map((p) => p.id);
  }

  const SORTS = ['registered_at', '-registered_at', 'vram', '-vram', 'gpu_count', '-gpu_count'];
  const TERMS = ['a100', 'A100-SXM4', 'h100', 'nvidia', 'mi250x', 'pcie'];
  const EXTRAS = ['', '&status=idle', '&min_vram=50000', '&min_gpus=2', '&status=idle&healthy_only=true&min_gpus=2'];

  it.each(TERMS)('matches the reference for gpu_model=%s under every static sort and filter', async (term) => {
    for (const sort of SORTS) {
      for (const extra of EXTRAS) {
        const query = `gpu_model=${encodeURIComponent(term)}&sort=${sort}${extra}`;
        expect(await ids(`${query}&limit=1000`), query).toEqual(expected(query));
      }
    }
  });

  it.each(TERMS)('pages through gpu_model=%s exactly once per provider, two at a time', async (term) => {
    for (const sort of SORTS) {
      const query = `gpu_model=${encodeURIComponent(term)}&sort=${sort}`;
      const want = expected(query);
      expect(want.length).toBeGreaterThan(2);
      expect(await allPages(`${query}&limit=2`), query).toEqual(want);
    }
    const query = `gpu_model=${encodeURIComponent(term)}&sort=-vram&status=idle`;
    expect(await allPages(`${query}&limit=1`)).toEqual(expected(query));
  });

  it('folds ASCII capitals only, alike under every sort; the migration refolds a machine written by the earlier rule', async () => {
    const tag = crypto.randomUUID().slice(0, 8);
    const machine = await register(h.app, {
      gpus: [gpu({ model_name: `NVIDIA ÄRCx-${tag} Pro`, vram: 1000, architecture: 'ÄDA' })],
    });
    const sorts = ['registered_at', '-vram', 'gpu_count', 'last_seen_at', '-last_seen_at'];
    const searches = async () => {
      const found: Record<string, string[]> = {};
      for (const sort of sorts) {
        for (const extra of ['', '&min_vram=1', '&architecture=%C3%84da', '&architecture=%C3%A4da']) {
          for (const term of [`ÄRCx-${tag}`, `nvidia ÄRCX-${tag.toUpperCase()}`, `äRCx-${tag}`]) {
            const query = `gpu_model=${encodeURIComponent(term)}&sort=${sort}${extra}`;
            found[query] = await ids(query);
          }
        }
      }
      return found;
    };
    // A capital outside ASCII matches as written (Ä is not ä); ASCII ones in any case; the same whatever the sort.
    const want = (query: string) => (query.includes('%C3%A4') ? [] : [machine.id]);
    const check = (found: Record<string, string[]>) => {
      for (const [query, got] of Object.entries(found)) expect(got, query).toEqual(want(query));
    };
    check(await searches());
    // As the earlier rule wrote it (Unicode's lower case in the summary and the model keys): the model walk misses it.
    await sql`UPDATE providers SET gpu_models = ${`|nvidia ärcx-${tag} pro|`}, gpu_architectures = '|äda|'
      WHERE id = ${machine.id}`.execute(h.database.db);
    await sql`UPDATE provider_models SET model = ${`nvidia ärcx-${tag} pro`} WHERE provider_id = ${machine.id}`.execute(
      h.database.db,
    );
    expect(await ids(`gpu_model=${encodeURIComponent(`ÄRCx-${tag}`)}`)).toEqual([]);
    await migrations['20250122000000_ascii_case_fold']!.up(h.database.db as Kysely<unknown>);
    check(await searches());
  });

  it('walks providers instead when a term names more models than it merges', async () => {
    const many = await register(h.app, {
      gpus: Array.from({ length: 40 }, (_, i) => gpu({ model_name: `Many-${String(i).padStart(2, '0')}`, vram: 1000 })),
    });
    const one = await register(h.app, { gpus: [gpu({ model_name: 'Many-05', vram: 2000 })] });
    expect(await ids('gpu_model=many-&sort=-gpu_count')).toEqual([many.id, one.id]);
    expect(await ids('gpu_model=many-&sort=-vram')).toEqual([one.id, many.id]);
    expect(await ids('gpu_model=many-0&sort=vram&limit=1')).toEqual([many.id]);
    expect(await allPages('gpu_model=many-&sort=gpu_count&limit=1')).toEqual([one.id, many.id]);
  });
});

describe('GET /providers by GPU model, asked again', () => {
  it('finds a model first registered after its term was asked, and loses one whose last machine left', async () => {
    // The service remembers each term's model names, so that its next page is one statement: that statement must
    // notice names the term matches now and did not then (and the reverse).
    expect(await ids('gpu_model=omega')).toEqual([]);
    const first = await register(h.app, { gpus: [gpu({ model_name: 'Omega One', vram: 10 })] });
    expect(await ids('gpu_model=omega')).toEqual([first.id]);
    const second = await register(h.app, { gpus: [gpu({ model_name: 'Omega Two', vram: 20 })] });
    expect(await ids('gpu_model=omega&sort=-vram')).toEqual([second.id, first.id]);
    expect(await ids('gpu_model=omega')).toEqual([first.id, second.id]);
    expect((await h.app.inject({ method: 'DELETE', url: `/providers/${first.id}` })).statusCode).toBe(200);
    expect(await ids('gpu_model=omega')).toEqual([second.id]);
    expect(await ids('gpu_model=omega%20one')).toEqual([]);
  });

  it('asks a term asked before in one statement, and sees a name swapped for another', async () => {
    const a = await register(h.app, { gpus: [gpu({ model_name: 'Sigma A', vram: 10 })] });
    const b = await register(h.app, { gpus: [gpu({ model_name: 'Sigma B', vram: 20 })] });
    let statements = 0;
    const counted = h.database.db.withPlugin({
      transformQuery: (args) => {
        statements++;
        return args.node;
      },
      transformResult: async (args) => args.result,
    });
    const names = new ModelNames();
    const page = async () => {
      statements = 0;
      const { items } = await listProviders(
        counted,
        { gpu_model: 'SIGMA', sort: 'registered_at', limit: 10 },
        3_600_000,
        names,
      );
      return { statements, ids: items.map((json) => (JSON.parse(json) as { id: string }).id) };
    };
    expect(await page()).toEqual({ statements: 2, ids: [a.id, b.id] });
    expect(await page()).toEqual({ statements: 1, ids: [a.id, b.id] });
    // As many names as before, one of them another: the remembered list is stale, the page asked again.
    const put = await h.app.inject({
      method: 'PUT',
      url: `/providers/${a.id}`,
      payload: { owner_id: 'owner-1', name: 'sigma-rig', gpus: [gpu({ model_name: 'Sigma C', vram: 30 })] },
    });
    expect(put.statusCode).toBe(200);
    expect(await page()).toEqual({ statements: 3, ids: [a.id, b.id] });
    expect(await page()).toEqual({ statements: 1, ids: [a.id, b.id] });
    expect(names.get('sigma')).toEqual(['sigma b', 'sigma c']);
  });
});

describe('provider_models keys', () => {
  /** The provider's keys, and whether each carries the provider's own sort values. */
  async function keysOf(id: string) {
    const { rows } = await sql<{ model: string; max_vram: string; gpu_count: number; in_step: boolean }>`
      SELECT pm.model, pm.max_vram::text AS max_vram, pm.gpu_count,
             (pm.registered_at = p.registered_at AND pm.max_vram = p.max_vram AND pm.gpu_count = p.gpu_count) AS in_step
      FROM provider_models pm JOIN providers p ON p.id = pm.provider_id
      WHERE pm.provider_id = ${id} ORDER BY pm.model`.execute(h.database.db);
    expect(rows.every((r) => r.in_step)).toBe(true);
    return rows.map((r) => `${r.model}/${r.max_vram}/${r.gpu_count}`);
  }

  it('follows registration, full update and deletion, and not heartbeats or status changes', async () => {
    const p = await register(h.app, {
      gpus: [gpu({ model_name: 'Zeta X1', vram: 100 }), gpu(), gpu({ model_name: 'ZETA x1', vram: 50 })],
    });
    const r = await register(h.app, { gpus: [gpu({ model_name: 'Zeta X3', vram: 150_000 })] });
    expect(await keysOf(p.id)).toEqual(['nvidia a100-sxm4-80gb/81920/3', 'zeta x1/81920/3']);
    expect(await ids('gpu_model=zeta&sort=-vram')).toEqual([r.id, p.id]);
    expect(await ids('gpu_model=zeta&sort=-gpu_count')).toEqual([p.id, r.id]);

    const put = await h.app.inject({
      method: 'PUT',
      url: `/providers/${p.id}`,
      payload: { owner_id: 'owner-1', name: 'zeta-rig', gpus: [gpu({ model_name: 'Zeta X2', vram: 200_000 })] },
    });
    expect(put.statusCode).toBe(200);
    expect(await keysOf(p.id)).toEqual(['zeta x2/200000/1']);
    expect(await ids('gpu_model=zeta&sort=-vram')).toEqual([p.id, r.id]);
    expect(await ids('gpu_model=zeta%20x1')).toEqual([]);
    expect(await ids('gpu_model=a100&sort=-vram')).not.toContain(p.id);

    await h.app.inject({
      method: 'POST',
      url: `/providers/${p.id}/heartbeat`,
      payload: { gpu_metrics: [{ index: 0 }] },
    });
    await h.app.inject({ method: 'PATCH', url: `/providers/${p.id}/status`, payload: { status: 'maintenance' } });
    expect(await keysOf(p.id)).toEqual(['zeta x2/200000/1']);
    expect(await ids('gpu_model=zeta&sort=-vram&status=maintenance')).toEqual([p.id]);

    expect((await h.app.inject({ method: 'DELETE', url: `/providers/${p.id}` })).statusCode).toBe(200);
    expect(await keysOf(p.id)).toEqual([]);
    expect(await ids('gpu_model=zeta&sort=-vram')).toEqual([r.id]);
  });

  it('are backfilled for providers stored before the migration that added them', async () => {
    // A database as the first migration left it, with a provider written by that version.
    const before = await createTestDatabase('registry');
    const old = await openDatabase<unknown>({ url: before.url, poolSize: 2, connectTimeoutMs: 2000 });
    const db = old.db as Kysely<unknown>;
    await migrateToLatest(db, 'provider-registry', { '20250101000000_create_providers': createProviders });
    await sql`
      INSERT INTO providers (id, owner_id, name, status, gpu_count, max_vram, gpu_models)
      VALUES ('11111111-1111-4111-8111-111111111111', 'o', 'old', 'idle', 3, 81920, '|a|b|')`.execute(db);
    await sql`
      INSERT INTO gpus (provider_id, idx, model_name, vram, driver_version) VALUES
        ('11111111-1111-4111-8111-111111111111', 0, 'NVIDIA A100', 81920, '1'),
        ('11111111-1111-4111-8111-111111111111', 1, 'nvidia a100', 40960, '1'),
        ('11111111-1111-4111-8111-111111111111', 2, 'Other', 1, '1')`.execute(db);
    await migrateToLatest(db, 'provider-registry', migrations);
    const { rows } = await sql<{ model: string; gpu_count: number }>`
      SELECT pm.model, pm.gpu_count FROM provider_models pm JOIN providers p ON p.id = pm.provider_id
      WHERE pm.registered_at = p.registered_at AND pm.max_vram = 81920 ORDER BY pm.model`.execute(db);
    expect(rows).toEqual([
      { model: 'nvidia a100', gpu_count: 3 },
      { model: 'other', gpu_count: 3 },
    ]);
    await old.close();
    await before.drop();
  });
});
