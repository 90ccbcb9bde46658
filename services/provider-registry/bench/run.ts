/**
 * `pnpm bench registry`: loads 1,000,000 providers / 4,000,000 GPUs
 * (`BENCH_PROVIDERS` sets another count) into a fresh database, starts the registry as its own process (real HTTP on loopback),
 * and measures filtered, paginated discovery and heartbeats through the
 * service next to the very same SQL issued directly through `pg` (captured
 * from the repository code, so both sides run identical statements).
 * Access control is on, as in production: the service trusts a test issuer
 * started here (its JWKS over HTTP, EdDSA tokens); discovery calls as an admin,
 * and each heartbeat carries the daemon token of the machine's owner.
 * BENCH_ONLY=1 prints the results instead of writing docs/benchmarks.md.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { machineLine, writeBenchSection } from '@gpu/bench-kit';
import { gpuModelKey, textArray, uuidArray } from '@gpu/common';
import { freePort, startTestIssuer } from '@gpu/common/testing';
import { type CompiledQuery, Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { listProviders, ModelNames } from '../src/db/discovery-repository.ts';
import { migrateRegistry } from '../src/db/migrate.ts';
import { searchOffers } from '../src/db/offer-repository.ts';
import type { RegistryDB } from '../src/db/schema.ts';
import { recordHeartbeats } from '../src/db/status-repository.ts';
import { cursorOf, type DiscoveryFilter } from '../src/domain/discovery.ts';
import { type OfferFilter, offerCursorOf } from '../src/domain/offers.ts';
import { loadFleet } from './dataset.ts';
import {
  type FleetResult,
  fleetDirect,
  fleetOverHttp,
  fleetOverHttpPaced,
  fleetOverNats,
  startScheduler,
} from './fleet.ts';
import { BenchHttpClient } from './http-client.ts';
import { type LoadResult, runLoad } from './load.ts';
import { describeWrites, perHeartbeat, settle, writeCounts } from './write-stats.ts';

const PROVIDERS = Number(process.env.BENCH_PROVIDERS ?? 1_000_000);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
/**
 * `BENCH_ACCESS=off` runs the service with access control off (`access.enabled: false`): every request is trusted,
 * no token verified, no owner scoping. Only to split what access control costs from the rest; the recorded
 * benchmark runs with it on, as in production.
 */
const ACCESS = process.env.BENCH_ACCESS !== 'off';
const LIST_CONCURRENCY = 4;
const HEARTBEAT_CONCURRENCY = 16;
const POOL_SIZE = 20;
const OFFLINE_AFTER_MS = 3_600_000;
/**
 * Issue #18's heartbeat target: at least the grouped path's rate before the fleet grew to a million (3,113/s
 * through the service at 100,000 providers, 16 clients: the run of 2026-11-23 on commit 14c23f2, CPU gauge 908 → 951
 * ms). An absolute rate moves with the host's speed: read it with this run's gauge.
 */
const HEARTBEATS_BEFORE = 3113;
/** Issue #41: a million daemons, one heartbeat each every 30 s. */
const FLEET_TARGET = 33_333;
/**
 * The rate the fleet's load generator offers (`BENCH_FLEET_RATE`), and for how long (`BENCH_FLEET_SECONDS`): one
 * heartbeat interval, 30 s, in which each machine of the fleet beats once or so. Rows of 10 s (before 2026-11-29) left
 * discovery's p99 the second slowest of ~140 latencies, which moved by several milliseconds between runs of one host;
 * 30 s gives ~540, its p99 the sixth slowest.
 */
const FLEET_RATE = Number(process.env.BENCH_FLEET_RATE ?? FLEET_TARGET);
const FLEET_SECONDS = Number(process.env.BENCH_FLEET_SECONDS ?? 30);
/** One heartbeat in this many carries metrics (the daemon sends only those that moved). */
const METRICS_EVERY = 10;
/** The daemon's default `heartbeat_answer_every`: a heartbeat without metrics asks for an answer every other beat. */
const ANSWER_EVERY = 2;
/**
 * How often the scheduler's discovery query is asked during the fleet's rows (`BENCH_DISCOVERY_RATE`, per second; 0:
 * in a closed loop, as runs before 2026-11-28 did). A scheduler asks when it places work, not back to back: a closed
 * loop kept one PostgreSQL backend busy the whole row (about 0.9 of the 2 cores at 1,000,000 machines), which the
 * CPU per heartbeat counted.
 */
const DISCOVERY_RATE = Number(process.env.BENCH_DISCOVERY_RATE ?? 20);
/**
 * `BENCH_LOOP=<n>`: after the fleet is loaded, only the goal's row (NATS on subjects naming the sender, the fleet's
 * rate, discovery meanwhile) `n` times, each printed, and nothing written: to compare a change on one loaded fleet,
 * rounds alternated, where a full run loads a fleet for each. No discovery or market table is measured.
 */
const LOOP = Number(process.env.BENCH_LOOP ?? 0);
if (!Number.isInteger(LOOP) || LOOP < 0)
  throw new Error(`BENCH_LOOP must be a whole number, not ${process.env.BENCH_LOOP}`);
/**
 * The nice value of the NATS rows' sender (`BENCH_FLEET_NICE`; 0: the platform's priority, as earlier runs).
 * It stands in for a million remote machines: at 10 it takes the CPU the platform's processes leave instead of
 * competing with them (discovery's query above all) as no remote daemon could. Its CPU is counted all the same.
 */
const FLEET_NICE = Number(process.env.BENCH_FLEET_NICE ?? 10);
if (!Number.isInteger(FLEET_NICE) || FLEET_NICE < 0 || FLEET_NICE > 19) {
  throw new Error(`BENCH_FLEET_NICE must be an integer from 0 to 19, not ${process.env.BENCH_FLEET_NICE}`);
}
/** Machines per POST /providers/heartbeats. */
const HTTP_BATCH = 100;
const root = fileURLToPath(new URL('..', import.meta.url));
const port = await freePort();
const base = `http://127.0.0.1:${port}`;
// The tokens outlive any run (the default 15 minutes would not outlive a full one on a slow machine).
const issuer = await startTestIssuer({ expiresInSeconds: 24 * 3600 });
/** Discovery's caller: an admin (reads every provider, as the scheduler does). */
const admin = await issuer.user(['admin']);

const log = (msg: string) => process.stderr.write(`[bench registry] ${msg}\n`);

async function createDatabase(): Promise<string> {
  const adminUrl = process.env.TEST_PG_URL;
  if (!adminUrl) throw new Error('TEST_PG_URL is not set: run through `pnpm bench registry`');
  const name = `registry_bench_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE "${name}"`);
  await admin.end();
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

/** Runs `fn` on a Kysely that records the SQL it sends, and returns those statements. */
async function capture(pool: pg.Pool, fn: (db: Kysely<RegistryDB>) => Promise<unknown>): Promise<CompiledQuery[]> {
  const queries: CompiledQuery[] = [];
  const db = new Kysely<RegistryDB>({
    dialect: new PostgresDialect({ pool }),
    log: (event) => {
      if (event.level === 'query') queries.push(event.query);
    },
  });
  await fn(db);
  return queries;
}

// A lean client (bench/http-client.ts), so that the measured latency is the service's, not node:http's garbage.
const http = new BenchHttpClient(port, admin.headers.authorization);

/** Whether the request answered 200; sent with the admin's token unless `authorization` names another. */
async function request(method: string, path: string, authorization?: string): Promise<boolean> {
  return (await http.request(method, path, authorization)) === 200;
}

async function startService(databaseUrl: string): Promise<ChildProcess> {
  // BENCH_CPU_PROF=<dir>: the service writes a V8 CPU profile there when it stops (to see where its time goes).
  const profile = process.env.BENCH_CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_CPU_PROF}`] : [];
  const child = spawn(process.execPath, [...profile, '--import', 'tsx', 'src/server.ts'], {
    cwd: root,
    env: {
      PATH: process.env.PATH,
      DATABASE_URL: databaseUrl,
      NATS_URL: process.env.TEST_NATS_URL ?? '',
      NATS_CREDENTIALS: process.env.TEST_NATS_CREDS ?? '',
      // Heartbeats whose subject names their sender: the test NATS server runs in operator mode, as this needs.
      REGISTRY__MESSAGING__SUBJECT_IDENTITY: 'true',
      PORT: String(port),
      HOST: '127.0.0.1',
      LOG_LEVEL: 'warn',
      AUTH_JWKS_URL: issuer.jwksUrl,
      AUTH_ISSUER: issuer.issuer,
      AUTH_AUDIENCE: issuer.audience,
      OFFLINE_AFTER: `${OFFLINE_AFTER_MS}ms`,
      REGISTRY__DATABASE__POOL_SIZE: String(POOL_SIZE),
      REGISTRY__SERVER__METRICS_ENABLED: 'true',
      ...(ACCESS ? {} : { ACCESS_CONTROL_ENABLED: 'false' }),
    },
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  // Stopped with the benchmark however it ends (a crash skips the finally that stops it; a signal, the exit hooks: a
  // service left running would take half of the next run's heartbeats from its queue group).
  process.once('exit', () => child.kill());
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(signal, () => {
      child.kill();
      process.exit(128 + (signal === 'SIGINT' ? 2 : signal === 'SIGTERM' ? 15 : 1));
    });
  }
  const deadline = Date.now() + 60_000;
  while (!(await request('GET', '/health').catch(() => false))) {
    if (Date.now() > deadline || child.exitCode !== null) throw new Error('the registry did not start');
    await new Promise((r) => setTimeout(r, 200));
  }
  return child;
}

interface Scenario {
  label: string;
  query: string;
  filter: DiscoveryFilter;
  /** Why the p99 target does not apply (its target column says so instead). */
  noTarget?: string;
}

function filterOf(query: string): DiscoveryFilter {
  const q = new URLSearchParams(query);
  const sort = (q.get('sort') ?? 'registered_at') as DiscoveryFilter['sort'];
  const cursor = q.get('cursor');
  const decoded = cursor ? cursorOf(cursor, sort) : undefined;
  if (typeof decoded === 'string') throw new Error(decoded);
  const num = (k: string) => (q.get(k) === null ? undefined : Number(q.get(k)));
  return {
    status: (q.get('status') ?? undefined) as DiscoveryFilter['status'],
    gpu_model: q.get('gpu_model') ?? undefined,
    architecture: q.get('architecture') ?? undefined,
    min_vram: num('min_vram'),
    min_gpus: num('min_gpus'),
    healthy_only: q.get('healthy_only') === 'true' ? true : undefined,
    sort,
    limit: num('limit') ?? 100,
    cursor: decoded,
  };
}

/** An offer search's filter, as the route parses its query (bench/run.ts's offers scenarios). */
function offerFilterOf(query: string): OfferFilter {
  const q = new URLSearchParams(query);
  const sort = (q.get('sort') ?? 'price') as OfferFilter['sort'];
  const cursor = q.get('cursor');
  const after = cursor ? offerCursorOf(cursor, sort) : undefined;
  if (typeof after === 'string') throw new Error(after);
  const num = (k: string) => (q.get(k) === null ? undefined : Number(q.get(k)));
  const str = (k: string) => q.get(k) ?? undefined;
  const model = str('gpu_model');
  return {
    max_price: str('max_price'),
    max_bid: str('max_bid'),
    min_free_gpus: num('min_free_gpus'),
    gpu_model: model === undefined ? undefined : gpuModelKey(model),
    min_vram: num('min_vram'),
    architecture: str('architecture'),
    min_reliability: num('min_reliability'),
    min_driver_version: str('min_driver_version'),
    min_compute_capability: str('min_compute_capability'),
    region: str('region'),
    sort,
    limit: num('limit') ?? 50,
    after,
  };
}

/** The cursor of page `page` (1-based) of a query of `path` (`/providers`, `/offers`), following X-Next-Cursor. */
async function cursorOfPage(query: string, page: number, path = '/providers'): Promise<string> {
  let cursor = '';
  for (let i = 1; i < page; i++) {
    const res = await fetch(`${base}${path}?${query}${cursor ? `&cursor=${cursor}` : ''}`, {
      headers: admin.headers,
    });
    await res.arrayBuffer();
    if (!res.ok) throw new Error(`GET ${path}?${query}: ${res.status}`);
    cursor = res.headers.get('x-next-cursor') ?? '';
    if (!cursor) throw new Error(`no page ${page} for ${query}`);
  }
  return cursor;
}

const fmt = (n: number, digits = 1) => n.toFixed(digits);

/** The service's heartbeat batches so far (its /metrics: the group commit's counters). */
async function heartbeatBatches(): Promise<{ batches: number; items: number }> {
  const res = await fetch(`${base}/metrics`, { headers: admin.headers });
  const text = await res.text();
  const read = (name: string) => Number(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(text)?.[1] ?? 0);
  return { batches: read('registry_heartbeat_batches_total'), items: read('registry_heartbeats_grouped_total') };
}

async function main() {
  const databaseUrl = await createDatabase();
  // The same session settings as the service's pool (src/server.ts).
  const pool = new pg.Pool({ connectionString: databaseUrl, max: POOL_SIZE, options: '-c jit=off' });
  // The database is dropped at the end with its connections (WITH (FORCE)): an idle one's end is no error.
  pool.on('error', () => {});
  const setupDb = new Kysely<RegistryDB>({ dialect: new PostgresDialect({ pool }) });
  await migrateRegistry(setupDb as Kysely<unknown>);

  const client = await pool.connect();
  const loadStart = performance.now();
  const { gpus, phases } = await loadFleet(client, PROVIDERS);
  const loadSeconds = (performance.now() - loadStart) / 1000;
  client.release();
  const loadPhases = `rows ${fmt(phases.rows)} s, indexes and keys ${fmt(phases.indexes)} s, VACUUM + ANALYZE ${fmt(phases.vacuumAnalyze)} s`;
  log(`loaded ${PROVIDERS} providers / ${gpus} GPUs in ${fmt(loadSeconds)} s (${loadPhases})`);
  const { rows: sizes } = await pool.query<{ name: string; heap: string; indexes: string }>(
    `SELECT relname AS name, pg_size_pretty(pg_table_size(oid)) AS heap, pg_size_pretty(pg_indexes_size(oid)) AS indexes
     FROM pg_class WHERE relname IN ('providers', 'provider_liveness', 'gpus', 'provider_models', 'offers')
       AND relkind = 'r'
     ORDER BY pg_total_relation_size(oid) DESC`,
  );
  const sizeLine = sizes.map((r) => `\`${r.name}\` ${r.heap} + ${r.indexes} of indexes`).join(', ');
  const sharedBuffers = (await pool.query<{ shared_buffers: string }>('SHOW shared_buffers')).rows[0]?.shared_buffers;

  const child = await startService(databaseUrl);
  const loadBefore = os.loadavg()[0]!;
  try {
    // Access control is on: a request without a token is refused, the admin's token is accepted.
    const anonymous = await http.request('GET', '/providers?limit=1', '');
    const authorized = await http.request('GET', '/providers?limit=1');
    if ((ACCESS && anonymous !== 401) || authorized !== 200) {
      throw new Error(`access control: ${anonymous} without a token (401 expected), ${authorized} with one`);
    }
    const scheduler = 'status=idle&gpu_model=a100&min_vram=40000&min_gpus=2&healthy_only=true&limit=50';
    const scenarios: Scenario[] = [];
    const add = (label: string, query: string, noTarget?: string) =>
      scenarios.push({ label, query, filter: filterOf(query), noTarget });
    add('`status=idle` (default sort, 100 per page)', 'status=idle&limit=100');
    add('scheduler: idle, ≥ 2 healthy A100s of ≥ 40 GB (default sort, 50 per page)', scheduler);
    add('the same, `sort=-vram` (largest GPU first)', `${scheduler}&sort=-vram`);
    add(
      '`architecture=hopper&min_gpus=4&sort=-gpu_count`, 100 per page',
      'architecture=hopper&min_gpus=4&sort=-gpu_count&limit=100',
    );
    const deep = 'status=idle&gpu_model=rtx%204090&sort=-last_seen_at&limit=100';
    add(
      'page 5 (cursor) of `status=idle&gpu_model=rtx 4090&sort=-last_seen_at`',
      `${deep}&cursor=${await cursorOfPage(deep, 5)}`,
      "none: the clock is in no index since issue #55 (a heartbeat's write is heap-only), so the page reads every idle narrow row",
    );

    // The floor under every one-client latency: a round trip that does no work, to PostgreSQL and to the service.
    const floorPg = await runLoad(async () => (await pool.query('SELECT 1')).rowCount === 1, {
      concurrency: 1,
      seconds: SECONDS,
    });
    const floorHealth = await runLoad(() => request('GET', '/health'), { concurrency: 1, seconds: SECONDS });
    log(
      `floor: SELECT 1 p50 ${fmt(floorPg.p50, 2)} p99 ${fmt(floorPg.p99, 2)} ms; GET /health p50 ${fmt(floorHealth.p50, 2)} p99 ${fmt(floorHealth.p99, 2)} ms`,
    );

    const listRows: string[] = [];
    const listResults: { service: LoadResult; direct: LoadResult }[] = [];
    /** One scenario: one client (the target), then 4 clients through the service and the same SQL through `pg`. */
    async function measureList(
      label: string,
      path: string,
      statements: CompiledQuery[],
      noTarget?: string,
    ): Promise<string> {
      const alone = await runLoad(() => request('GET', path), { concurrency: 1, seconds: SECONDS });
      const service = await runLoad(() => request('GET', path), { concurrency: LIST_CONCURRENCY, seconds: SECONDS });
      const direct = await runLoad(
        async () => {
          // On one connection, as the service sends a page's statements.
          const client = await pool.connect();
          try {
            for (const q of statements) await client.query(q.sql, q.parameters as unknown[]);
          } finally {
            client.release();
          }
          return true;
        },
        { concurrency: LIST_CONCURRENCY, seconds: SECONDS },
      );
      listResults.push({ service, direct });
      listResults.push({ service: alone, direct });
      const met = noTarget ?? `< 20 ms: ${alone.p99 < 20 && alone.errors === 0 ? 'met' : '**missed**'}`;
      log(
        `${path}: 1 client p99 ${fmt(alone.p99, 2)} ms; service p50 ${fmt(service.p50, 2)} p99 ${fmt(service.p99, 2)} ms ${fmt(service.perSecond, 0)}/s (errors ${service.errors}); direct p50 ${fmt(direct.p50, 2)} p99 ${fmt(direct.p99, 2)} ms ${fmt(direct.perSecond, 0)}/s`,
      );
      return `| ${label} | ${fmt(alone.p50, 2)} / ${fmt(alone.p99, 2)} ms · ${fmt(alone.perSecond, 0)}/s | ${fmt(direct.p50, 2)} / ${fmt(direct.p99, 2)} ms · ${fmt(direct.perSecond, 0)}/s | ${fmt(service.p50, 2)} / ${fmt(service.p99, 2)} ms · ${fmt(service.perSecond, 0)}/s | ${met} |`;
    }
    for (const s of LOOP > 0 ? [] : scenarios) {
      // The statements of a page asked again, as the service asks it (a term's model names known from the first).
      const names = new ModelNames();
      const ask = (db: Kysely<RegistryDB>) => listProviders(db, s.filter, OFFLINE_AFTER_MS, names);
      await capture(pool, ask);
      const statements = await capture(pool, ask);
      listRows.push(await measureList(s.label, `/providers?${s.query}`, statements, s.noTarget));
    }

    // The market (issue #28): renters' offer searches, with the same measurements.
    const offerRows: string[] = [];
    const deepOffers = 'min_free_gpus=2&sort=price&limit=50';
    const offerScenarios: [string, string][] = [
      ['cheapest first (`sort=price`, 50 per page)', 'sort=price&limit=50'],
      [
        'most reliable first, ≥ 4 free GPUs (`sort=-reliability&min_free_gpus=4`)',
        'sort=-reliability&min_free_gpus=4&limit=50',
      ],
      [
        'H100s at most 5.5 per GPU-hour, reliability ≥ 0.95, cheapest first',
        'gpu_model=H100&max_price=5.5&min_reliability=0.95&sort=price&limit=50',
      ],
      ['one region, driver ≥ 550, cheapest first', 'region=region-3&min_driver_version=550&sort=price&limit=50'],
      [
        'at a bid: H100s where a bid of 2 wins a free GPU, lowest bid floor first (`max_bid=2&sort=bid_floor`)',
        'gpu_model=H100&max_bid=2&sort=bid_floor&limit=50',
      ],
      [
        'page 5 (cursor) of `min_free_gpus=2&sort=price`',
        `${deepOffers}&cursor=${await cursorOfPage(deepOffers, 5, '/offers')}`,
      ],
    ];
    for (const [label, query] of LOOP > 0 ? [] : offerScenarios) {
      const statements = await capture(pool, (db) => searchOffers(db, offerFilterOf(query)));
      offerRows.push(await measureList(label, `/offers?${query}`, statements));
    }
    const { rows: market } = await pool.query<{ offers: string; listed: string; bids: string }>(
      `SELECT count(*) AS offers, count(*) FILTER (WHERE free_gpus > 0) AS listed,
         count(*) FILTER (WHERE free_gpus > 0 AND bid_floor IS NOT NULL) AS bids FROM offers`,
    );

    const { rows } = await pool.query<{ id: string; owner_id: string }>(
      `SELECT id, owner_id FROM providers WHERE status IN ('idle', 'busy')`,
    );
    const pick = (i: number) => rows[(i * 7919) % rows.length]!;
    // A heartbeat's caller is the daemon of the machine's owner (a client token acting for that owner, as the
    // provider daemon sends): one token per owner, signed before the measurements.
    const daemons = new Map<string, string>();
    for (const owner of new Set(rows.map((r) => r.owner_id))) {
      daemons.set(owner, (await issuer.client('daemon', owner)).headers.authorization);
    }
    log(`heartbeats: one daemon token per owner (${daemons.size} owners)`);
    // With NATS connected the service records status events in the heartbeat's statement; so does the replay.
    // A daemon's write is limited to its owner's machines; so is the replayed statement.
    const recording = process.env.TEST_NATS_URL ? ({ reason: 'heartbeat', correlation: 'bench' } as const) : undefined;
    const first = rows[0]!;
    const [beat] = await capture(pool, (db) =>
      recordHeartbeats(db, [{ id: first.id, owner: first.owner_id, daemon: null }], recording),
    );
    if (!beat) throw new Error('no heartbeat statement captured');
    // The statement names the provider and its owner in arrays (a batch of one), sent as binary parameters.
    const isOne = (p: unknown, one: Buffer) => Buffer.isBuffer(p) && p.equals(one);
    const idIndexes = beat.parameters.flatMap((p, i) => (isOne(p, uuidArray([first.id])) ? [i] : []));
    const ownerIndexes = beat.parameters.flatMap((p, i) => (isOne(p, textArray([first.owner_id])) ? [i] : []));
    if (idIndexes.length === 0 || ownerIndexes.length === 0) {
      throw new Error('heartbeat statement: provider or owner parameter not found');
    }
    // The owner's daemon may heartbeat its machine; another owner's daemon may not (access control is on).
    const own = await request('POST', `/providers/${first.id}/heartbeat`, daemons.get(first.owner_id));
    const other = rows.find((r) => r.owner_id !== first.owner_id);
    const foreign =
      other && (await http.request('POST', `/providers/${first.id}/heartbeat`, daemons.get(other.owner_id)));
    if (!own || (ACCESS && other && foreign !== 403)) {
      throw new Error(`heartbeat access: owner's daemon ${own ? 'accepted' : 'refused'}, another's got ${foreign}`);
    }
    // A running service verified each daemon's token at its first heartbeat and answers the next ones from its
    // verified-token cache for the token's life (15 minutes; a daemon beats every few seconds). Without these first
    // heartbeats here, most of the measured ones would be a token's first (5,000 tokens, about 2 heartbeats each).
    const firstMachine = new Map<string, string>();
    for (const r of rows) if (!firstMachine.has(r.owner_id)) firstMachine.set(r.owner_id, r.id);
    const firsts = [...firstMachine];
    await Promise.all(
      Array.from({ length: HEARTBEAT_CONCURRENCY }, async (_, worker) => {
        for (let i = worker; i < firsts.length; i += HEARTBEAT_CONCURRENCY) {
          const [owner, id] = firsts[i]!;
          if (!(await request('POST', `/providers/${id}/heartbeat`, daemons.get(owner)))) {
            throw new Error(`first heartbeat of ${owner}'s daemon refused`);
          }
        }
      }),
    );
    // What each heartbeat wrote (rows updated, HOT share, index entries), from the table statistics: every call,
    // the warm-up's too, is counted; the statistics are read once every backend has flushed them.
    let sent = 0;
    await settle();
    const beforeService = await writeCounts(pool);
    const beatService = await runLoad(
      (i) => {
        const p = pick(i);
        sent += 1;
        return request('POST', `/providers/${p.id}/heartbeat`, daemons.get(p.owner_id));
      },
      { concurrency: HEARTBEAT_CONCURRENCY, seconds: SECONDS },
    );
    const serviceSent = sent;
    await settle();
    const beforeDirect = await writeCounts(pool);
    const beatDirect = await runLoad(
      async (i) => {
        const p = pick(i);
        const params = [...beat.parameters];
        for (const i of idIndexes) params[i] = uuidArray([p.id]);
        for (const i of ownerIndexes) params[i] = textArray([p.owner_id]);
        sent += 1;
        const r = await pool.query(beat.sql, params);
        return r.rowCount === 1;
      },
      { concurrency: HEARTBEAT_CONCURRENCY, seconds: SECONDS },
    );
    await settle();
    const afterDirect = await writeCounts(pool);
    const serviceWrites = perHeartbeat(beforeService, beforeDirect, serviceSent);
    const directWrites = perHeartbeat(beforeDirect, afterDirect, sent - serviceSent);
    log(`heartbeat writes: service ${describeWrites(serviceWrites)}; direct ${describeWrites(directWrites)}`);
    const ratio = beatService.perSecond / beatDirect.perSecond;
    log(
      `heartbeats: service ${fmt(beatService.perSecond, 0)}/s (errors ${beatService.errors}), direct ${fmt(beatDirect.perSecond, 0)}/s, ratio ${fmt(ratio, 2)}`,
    );

    // The fleet's rate (issue #41): heartbeats over NATS and over HTTP on the fleet's clock with discovery measured
    // meanwhile, at the fleet's rate and at half of it; POST /providers/heartbeats as fast as it goes; and the direct
    // replay of the batch write, on batches of the size the service made.
    const natsUrl = process.env.TEST_NATS_URL;
    if (!natsUrl) throw new Error('TEST_NATS_URL is not set: run through `pnpm bench registry`');
    // The scheduler's discovery query from a process of its own, as a scheduler is (bench/discovery-client.ts).
    const schedulerProcess = await startScheduler({
      port,
      authorization: admin.headers.authorization,
      path: `/providers?${scheduler}`,
      intervalMs: DISCOVERY_RATE > 0 ? 1000 / DISCOVERY_RATE : 0,
    });
    const discoveryDuring = (seconds: number) => schedulerProcess.during(seconds);
    const ms = (v: number | null) => (v === null ? '–' : fmt(v * 1000, 1));
    const perOwner = new Map<string, number>();
    for (const r of rows) perOwner.set(r.owner_id, (perOwner.get(r.owner_id) ?? 0) + 1);
    const httpBatch = Math.min(HTTP_BATCH, Math.max(...perOwner.values()));
    const post = (path: string, body: string, authorization: string) => http.post(path, body, authorization);
    const fleetRows: string[] = [];
    let meanBatch = 0;
    const row = (label: string, offered: number, r: FleetResult, batch: number) => {
      const met =
        r.perSecond >= offered * 0.99 && r.refused === 0 && r.unanswered === 0 ? 'kept up' : '**fell behind**';
      const discoveryMet = r.discovery.p99 < 20 && r.discovery.errors === 0 ? 'met' : '**missed**';
      log(
        `${label}: offered ${offered}/s, applied ${fmt(r.perSecond, 0)}/s (${r.applied} of ${r.sent}; ${r.asked} asked: ok ${r.ok}, refused ${r.refused}, unanswered ${r.unanswered}), p50 ${fmt(r.p50, 1)} p99 ${fmt(r.p99, 1)} ms, mean batch ${fmt(batch, 0)}, CPU µs/beat service ${ms(r.cpu.service)} load ${ms(r.cpu.load)} pg ${ms(r.cpu.postgres)} nats ${ms(r.cpu.nats)} machine ${ms(r.cpu.machine)}; discovery p99 ${fmt(r.discovery.p99, 2)} ms`,
      );
      fleetRows.push(
        `| ${label} | ${offered.toLocaleString('en-US')} | ${fmt(r.perSecond, 0)} (${met}) | ${fmt((100 * r.asked) / Math.max(1, r.sent), 0)} % | ${fmt(r.p50, 1)} / ${fmt(r.p99, 1)} ms | ${r.refused} / ${r.unanswered} | ${fmt(batch, 0)} | ${ms(r.cpu.service)} · ${ms(r.cpu.load)} · ${ms(r.cpu.postgres)} · ${ms(r.cpu.nats)} · ${ms(r.cpu.machine)} | ${r.coresBusy === null ? '–' : fmt(r.coresBusy, 2)} | ${fmt(r.discovery.p50, 2)} / ${fmt(r.discovery.p99, 2)} ms, ${fmt(r.discovery.perSecond, 0)}/s (${discoveryMet}) |`,
      );
    };
    const written = async () => (await heartbeatBatches()).items;
    // As the daemon sends them (an answer asked every other beat and with metrics), at the fleet's rate and at half of
    // it; then a request for every heartbeat (`heartbeat_answer_every: 1`), at the fleet's rate.
    const natsRuns: [number, number, string, boolean][] = [
      [FLEET_RATE, ANSWER_EVERY, `NATS as the daemon sends (\`heartbeat_answer_every: ${ANSWER_EVERY}\`)`, false],
      [
        Math.round(FLEET_RATE / 2),
        ANSWER_EVERY,
        `NATS as the daemon sends (\`heartbeat_answer_every: ${ANSWER_EVERY}\`)`,
        false,
      ],
      [FLEET_RATE, 1, 'NATS, a request per heartbeat (`heartbeat_answer_every: 1`)', false],
      [
        FLEET_RATE,
        ANSWER_EVERY,
        'NATS as the daemon sends, on subjects naming the sender (`subject_identity`: no token)',
        true,
      ],
    ];
    const overNats = (rate: number, answerEvery: number, subjectIdentity: boolean, seconds = FLEET_SECONDS) =>
      fleetOverNats(
        {
          natsUrl,
          prefix: 'registry.heartbeats',
          machines: rows,
          daemons,
          perSecond: rate,
          seconds,
          metricsEvery: METRICS_EVERY,
          answerEvery,
          subjectIdentity,
          nice: FLEET_NICE,
          written,
          servicePid: child.pid!,
        },
        discoveryDuring,
      );
    // Unrecorded: the service's first NATS traffic (its subscriptions' first messages, the code paths' first runs),
    // which made the first recorded row of each run do worst whatever it sent; a registry in production is warm.
    await overNats(FLEET_RATE, ANSWER_EVERY, true, 4);
    await overNats(FLEET_RATE, ANSWER_EVERY, false, 4);
    if (LOOP > 0) {
      const [, , label] = natsRuns.at(-1)!;
      for (let round = 1; round <= LOOP; round++) {
        const before = await heartbeatBatches();
        const r = await overNats(FLEET_RATE, ANSWER_EVERY, true);
        const after = await heartbeatBatches();
        row(
          `round ${round}/${LOOP}: ${label}`,
          FLEET_RATE,
          r,
          (after.items - before.items) / Math.max(1, after.batches - before.batches),
        );
      }
      schedulerProcess.stop();
      return;
    }
    for (const [rate, answerEvery, label, subjectIdentity] of natsRuns) {
      const before = await heartbeatBatches();
      const r = await overNats(rate, answerEvery, subjectIdentity);
      const after = await heartbeatBatches();
      const batch = (after.items - before.items) / Math.max(1, after.batches - before.batches);
      if (rate === FLEET_RATE && answerEvery === ANSWER_EVERY && !subjectIdentity) meanBatch = batch;
      row(label, rate, r, batch);
    }
    for (const rate of [FLEET_RATE, Math.round(FLEET_RATE / 2)]) {
      const before = await heartbeatBatches();
      const r = await fleetOverHttpPaced(
        {
          machines: rows,
          daemons,
          perRequest: httpBatch,
          perSecond: rate,
          seconds: FLEET_SECONDS,
          servicePid: child.pid!,
          post,
        },
        discoveryDuring,
      );
      const after = await heartbeatBatches();
      const batch = (after.items - before.items) / Math.max(1, after.batches - before.batches);
      row(
        `HTTP \`POST /providers/heartbeats\`, ${httpBatch} machines of one owner per request, open loop`,
        rate,
        r,
        batch,
      );
    }
    schedulerProcess.stop();
    const fleetHttp = await fleetOverHttp({
      machines: rows,
      daemons,
      perRequest: httpBatch,
      concurrency: 8,
      seconds: SECONDS,
      post,
    });
    log(`fleet over HTTP, closed loop: ${fmt(fleetHttp.beatsPerSecond, 0)} heartbeats/s (errors ${fleetHttp.errors})`);
    const replayBatch = Math.max(1, Math.round(meanBatch));
    const direct = await fleetDirect({
      pool,
      machines: rows,
      batch: replayBatch,
      workers: 2,
      seconds: SECONDS,
      metricsEvery: METRICS_EVERY,
    });
    log(`fleet direct: ${fmt(direct.beatsPerSecond, 0)} heartbeats/s in batches of ${replayBatch}`);
    const fleetMarkdown = `### The fleet's rate (issue #41)

A million daemons beating every 30 s send ${FLEET_TARGET.toLocaleString('en-US')} heartbeats a second. Each row sends heartbeats on the fleet's
clock (open loop: however slowly the registry answers) for ${FLEET_SECONDS} s over the ${rows.length.toLocaleString('en-US')} idle and busy machines, each
with its owner's daemon token (verified as any request's), while a scheduler of its own process (as a scheduler is:
the benchmark process's collections, its heap holding the fleet, no longer fall into the latencies) runs the discovery
query (\`${scheduler}\`) with one client, ${DISCOVERY_RATE > 0 ? `${DISCOVERY_RATE} times a second (a scheduler asks as it places work; a closed loop, as before 2026-11-28, kept a PostgreSQL backend busy the whole row, which the CPU per heartbeat counted)` : 'in a closed loop (`BENCH_DISCOVERY_RATE=0`)'}. Over NATS, a load generator of its own process${FLEET_NICE !== 0 ? ` (at nice ${FLEET_NICE}: it stands in for remote machines, so it takes the CPU the platform's processes leave rather than competing with them; its CPU counted all the same, and the answers' latency, timed by it, includes its own waits for a core)` : ''} sends each heartbeat on
\`registry.heartbeats.<provider ID>\` as the provider daemon does: one in ${METRICS_EVERY} with its first GPU's metrics (new values each
time: the daemon sends metrics that moved), and as a request (with a reply subject) only when it carries metrics or when
the machine's last one was published unanswered (the daemon's \`heartbeat_answer_every\`, ${ANSWER_EVERY} by default), else published; the
last NATS row sends as daemons holding the NATS users auth issues, each heartbeat on
\`registry.heartbeats.<owner ID>.<client ID>.<provider ID>\` with no token (the registry's \`messaging.subject_identity\`; the test
NATS server runs in operator mode and enforces who may publish there);
over HTTP, this process sends \`POST /providers/heartbeats\` with ${httpBatch} machines of one owner each (a daemon or relay for many
machines), every one answered. "Applied" is what the registry wrote (its count of heartbeats written), from the
first send to the last write; CPU per heartbeat applied, by process, from /proc (µs; "load" is the sender, over HTTP
this process; the scheduler's few µs are in the machine's column only). "Mean batch": heartbeats per statement of the service's group commit.

| path | offered/s | applied/s | asked an answer | answer p50 / p99 | refused / unanswered | mean batch | CPU µs/heartbeat: service · load · PostgreSQL · NATS · machine | cores busy | discovery p50 / p99 during it (1 client, asked/s; target p99 < 20 ms) |
|---|---|---|---|---|---|---|---|---|---|
${fleetRows.join('\n')}

As fast as it goes: \`POST /providers/heartbeats\` from 8 connections (closed loop, ${SECONDS} s) wrote **${fmt(fleetHttp.beatsPerSecond, 0)} heartbeats/s**
(p99 ${fmt(fleetHttp.p99, 1)} ms per request of ${httpBatch}, ${fleetHttp.errors} failed); the direct replay of the service's batch write
(\`recordHeartbeats\` on batches of ${replayBatch}, one in ${METRICS_EVERY} with metrics, through a \`pg\` pool as the service's (its prepared statements too), 2 at once, no HTTP or
NATS) wrote ${fmt(direct.beatsPerSecond, 0)}/s: the service over HTTP at ${fmt(fleetHttp.beatsPerSecond / direct.beatsPerSecond, 2)}x its own SQL, which is PostgreSQL's share.`;

    const markdown = `## registry

\`pnpm bench registry\` — ${machineLine()}

${PROVIDERS.toLocaleString('en-US')} providers and ${gpus.toLocaleString('en-US')} GPUs (1-8 per provider, 10 models, 60 % idle),
loaded with set-based SQL in ${fmt(loadSeconds)} s (${loadPhases}: the indexes and keys are built after the rows,
then checked against the migrations'). On disk after the load: ${sizeLine}; PostgreSQL's \`shared_buffers\`:
${sharedBuffers} (\`pnpm bench registry\` gives the test server 2 GB, sized for this fleet as for a production registry; the
tests' server keeps PostgreSQL's 128 MB). The registry runs as its own process (PostgreSQL pool of ${POOL_SIZE},
log level \`warn\`, NATS connected) and is called over HTTP with keep-alive on loopback, by a lean client that reads
every response into one reused buffer per connection (\`bench/http-client.ts\`). ${
      ACCESS
        ? `Access control is on, as in
production: the service verifies each request's EdDSA access token against a JWKS fetched over HTTP (from a test
issuer the benchmark starts); discovery calls as an admin, each heartbeat with the daemon token of the machine's owner
(${daemons.size.toLocaleString('en-US')} owners, one token each).`
        : '**Access control is off** (`BENCH_ACCESS=off`: no token verified, no owner scoping; not as in production).'
    } "direct" replays through a \`pg\`
pool of the same size the exact statements the repository sends for the same request (captured from Kysely), in the
same run. Each row ran ${SECONDS} s after a 1 s warm-up; load generator, service and PostgreSQL share the machine's cores.

Discovery (p50 / p99 latency · requests per second). The p99 target is judged on one client (a request's own
latency); with ${LIST_CONCURRENCY} concurrent clients on ${os.cpus().length} cores the latency also holds the time requests queue for a core.

| query | service, 1 client | direct (pg), ${LIST_CONCURRENCY} clients | service, ${LIST_CONCURRENCY} clients | p99 target (1 client) |
|---|---|---|---|---|
${listRows.join('\n')}

The market (issue #28): renters' searches of offers (\`GET /offers\`, a renter's question in each row; 50 per page),
${Number(market[0]?.offers ?? 0).toLocaleString('en-US')} offers (one per provider and GPU model), ${Number(market[0]?.listed ?? 0).toLocaleString('en-US')} of them on the market (free GPUs:
an idle machine's healthy ones; ${Number(market[0]?.bids ?? 0).toLocaleString('en-US')} of those of machines that take bids, one in ten, at floors of 0.50-3.49),
priced from billing's card and scored 0.8-1, measured as discovery above in the same run:

| search | service, 1 client | direct (pg), ${LIST_CONCURRENCY} clients | service, ${LIST_CONCURRENCY} clients | p99 target (1 client) |
|---|---|---|---|---|
${offerRows.join('\n')}

The floor under those one-client latencies, measured in the same run: a bare \`SELECT 1\` through \`pg\` takes
${fmt(floorPg.p50, 2)} / ${fmt(floorPg.p99, 2)} ms (p50 / p99), \`GET /health\` (the service's HTTP stack and one \`SELECT 1\`)
${fmt(floorHealth.p50, 2)} / ${fmt(floorHealth.p99, 2)} ms: what a request costs here before it does any work.

Heartbeats (no metrics; random idle/busy providers), ${HEARTBEAT_CONCURRENCY} concurrent clients, after one first heartbeat from
each owner's daemon (where a running service verifies its token; later ones are served from the verified-token
cache for the token's life, as on a live platform where a daemon beats every few seconds). The service writes heartbeats that
arrive together in one statement (group commit, see the service README); "direct" sends the single-heartbeat
statement once per heartbeat (limited to the daemon's owner, as the service's is), as the service did before grouping:

| | direct (pg) | through the service | ratio | target (service) |
|---|---|---|---|---|
| heartbeats/s | ${fmt(beatDirect.perSecond, 0)} (p99 ${fmt(beatDirect.p99, 2)} ms) | ${fmt(beatService.perSecond, 0)} (p99 ${fmt(beatService.p99, 2)} ms) | ${fmt(ratio, 2)}x | ≥ 0.5x direct: ${ratio >= 0.5 ? 'met' : '**missed**'}; ≥ ${HEARTBEATS_BEFORE.toLocaleString('en-US')}/s (#18: the grouped path at 100,000 providers, CPU gauge 908 → 951 ms): ${beatService.perSecond >= HEARTBEATS_BEFORE ? 'met' : '**missed**'} |
| writes per heartbeat | ${describeWrites(directWrites)} | ${describeWrites(serviceWrites)} | | |

"Writes per heartbeat": the row updates each heartbeat made (\`pg_stat_user_tables\`: \`n_tup_upd\`, \`n_tup_hot_upd\`, over
every heartbeat of the run, its warm-up's too), the share of them that were HOT (heap-only: no index entry), and the index
entries the others wrote (one in each index of their table). Issue #29 moved the heartbeat's clock out of the provider
row into the narrow \`provider_liveness\` row: a heartbeat that changes no status updates that row only (its indexed
clock keeps the update from being HOT: two index entries, its key and \`(status, last_seen_at, provider_id)\`) and
leaves \`providers\` and its nine indexes untouched, where it had written a new provider row version and an entry in
each of the nine.

${fleetMarkdown}

Service errors: ${listResults.reduce((n, r) => n + r.service.errors, 0) + beatService.errors}. Machine load average (1 min) at the
start of the measurements: ${fmt(loadBefore, 1)}, at the end: ${fmt(os.loadavg()[0]!, 1)} (on ${os.cpus().length} cores; other work on the machine inflates
both columns alike, the service column more, as it needs CPU for the service, its HTTP client and PostgreSQL at once).`;
    writeBenchSection('registry', markdown);
  } finally {
    http.close();
    await issuer.close();
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
    await pool.end();
    const admin = new pg.Client({ connectionString: process.env.TEST_PG_URL });
    await admin.connect();
    await admin.query(`DROP DATABASE IF EXISTS "${new URL(databaseUrl).pathname.slice(1)}" WITH (FORCE)`);
    await admin.end();
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`${(err as Error).stack ?? err}\n`);
    process.exit(1);
  },
);
