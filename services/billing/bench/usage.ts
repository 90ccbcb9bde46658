/**
 * `pnpm bench billing` (after the ledger benchmark), or `pnpm bench billing-usage` alone: usage updates per second
 * with 10,000 active sessions (`BENCH_SESSIONS`), over HTTP (the real listening service, keep-alive connections
 * from a load generator in a process of its own) and over NATS (JetStream publishes from a publisher in a process
 * of its own, consumed by the service's durable consumer). About 5 % of the messages are sent twice (a daemon's
 * retry); afterwards every unique message must have exactly one usage record and the ledger must be intact. The
 * CPU each process used is read for every row (@gpu/bench-kit, process-cpu.ts), so a bound can be told from the load
 * generator's share. Writes the `billing-usage` section of docs/benchmarks.md (only prints it with BENCH_ONLY set).
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import os from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type CpuSnapshot, cpuSince, cpuSnapshot, machineLine, processMs, writeBenchSection } from '@gpu/bench-kit';
import {
  connectPublisher,
  createLogger,
  type NatsPublisher,
  PREPARED,
  startTracing,
  UNCHECKED_PRINCIPAL,
} from '@gpu/common';
import { createTestDatabase, startTestIssuer, testEnv } from '@gpu/common/testing';
import { jetstreamManager } from '@nats-io/jetstream';
import { type CompiledQuery, Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { startUsageConsumer, USAGE_CONSUMER } from '../src/adapters/usage-consumer.ts';
import { billingContext, buildApp } from '../src/app.ts';
import { billingConfigSchema } from '../src/config.ts';
import { openBillingDatabase } from '../src/db/open.ts';
import type { BillingDB } from '../src/db/schema.ts';
import { postTransfers } from '../src/domain/ledger/ledger.ts';
import { Dec } from '../src/domain/ledger/money.ts';
import { startSession } from '../src/domain/sessions/start.ts';
import { applyUsageBatch } from '../src/domain/sessions/usage-updates.ts';
import { createWallet } from '../src/domain/wallets/wallets.ts';
import { checkLedgerInvariant } from './ledger-invariant.ts';

const SESSIONS = Number(process.env.BENCH_SESSIONS ?? 10_000);
/** Targets of issue #18: one report per request, and batched (NATS, several reports per request). */
const TARGET_SINGLE = 3_000;
const TARGET_BATCHED = 10_000;
/** Issue #55: a million rented GPUs reporting once a minute. */
const TARGET_FLEET = 16_667;
const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
/** Seconds of the same HTTP load run first, uncounted (JIT warm-up of service and load generator). */
const WARMUP_SECONDS = Number(process.env.BENCH_WARMUP_SECONDS ?? 5);
const HTTP_WORKERS = Number(process.env.BENCH_CONCURRENCY ?? 64);
/** Reports per request on POST /usage-updates: a daemon on an 8-GPU machine with 8 rentals. */
const HTTP_BATCH = Number(process.env.BENCH_HTTP_BATCH ?? 8);
/** Unique NATS messages: by default 5 per session (10 s at the target). */
const NATS_MESSAGES = Number(process.env.BENCH_NATS_MESSAGES ?? 5 * SESSIONS);
const ADDRESS = '11111111111111111111111111111111';
const ENV_DIR = process.env.TEST_ENV_DIR;
/** A folder to write a CPU profile of the service's process per row into (`<row>.cpuprofile`), for where time goes. */
const PROFILE_DIR = process.env.BENCH_PROFILE;
/** Workers of the direct replay: the usage batches one service instance runs at once. */
const DIRECT_WORKERS = 2;
const loadAverage = () => (os.loadavg()[0] ?? 0).toFixed(1);

/**
 * `BENCH_TRACING=1`: the service traces every request (OpenTelemetry on, every trace kept), exporting over OTLP/HTTP
 * to a receiver in a process of its own that reads and drops them: what tracing on costs the service. (Reports over
 * NATS carry no trace context from this publisher, so their row makes no spans.)
 */
if (process.env.BENCH_TRACING === '1') {
  const receiver = spawn(
    process.execPath,
    [
      '-e',
      "const s=require('node:http').createServer((q,r)=>{q.resume();q.on('end',()=>r.end())});" +
        "s.listen(0,'127.0.0.1',()=>console.log(s.address().port))",
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  receiver.unref();
  const [line] = (await once(receiver.stdout!, 'data')) as [Buffer];
  process.env.OTEL_EXPORTER_OTLP_ENDPOINT = `http://127.0.0.1:${line.toString().trim()}`;
  await startTracing({ service: 'billing-service' });
  process.once('exit', () => receiver.kill());
}

const testDb = await createTestDatabase('billing_usage_bench');
// Access control on, as in production: the service trusts a test issuer's keys, and the load generator sends the
// token of the daemon acting for the provider machine's owner (checked against each session's provider owner).
const issuer = await startTestIssuer({ expiresInSeconds: 24 * 3600 });
const providerOwner = crypto.randomUUID();
const authorization = (await issuer.client('daemon', providerOwner)).headers.authorization;
const config = billingConfigSchema.parse({
  log_level: 'silent',
  access: issuer.accessConfig,
  database: { url: testDb.url, pool_size: 40 },
  billing: { billing_interval: '0s' },
});
const database = await openBillingDatabase(config);
/** The pool the direct replay's capture runs on (a Kysely of its own that logs the statements it sends). */
const capturePool = new pg.Pool({ connectionString: testDb.url, max: 2 });
const db = database.db;
const logger = createLogger({ service: 'billing-bench', instanceId: 'bench', level: 'silent' });
const deps = { config, logger, db, chain: null };
const ctx = billingContext(deps);
const app = await buildApp(deps, ctx);
await app.listen({ port: 0, host: '127.0.0.1' });
const { port } = app.server.address() as { port: number };
// The service really verifies: a report without a token is refused.
const anonymous = await fetch(`http://127.0.0.1:${port}/api/v1/billing/usage-update`, {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: '{}',
});
if (anonymous.status !== 401) throw new Error(`expected 401 without a token, got ${anonymous.status}`);

console.log(`starting ${SESSIONS.toLocaleString('en')} sessions`);
const setupStarted = Date.now();
const provider = await createWallet(db, {
  ownerType: 'provider',
  ownerId: crypto.randomUUID(),
  holderId: providerOwner,
  solanaAddress: ADDRESS,
});
// The renters' wallets and accounts in two statements, funded through the ledger 500 at a time.
await sql`INSERT INTO wallets (id, owner_type, owner_id, holder_id, solana_address)
  SELECT gen_random_uuid(), 'user', o, o, ${ADDRESS} FROM (SELECT gen_random_uuid() AS o FROM generate_series(1, ${SESSIONS})) g`.execute(
  db,
);
await sql`INSERT INTO ledger_accounts (id, wallet_id, kind, non_negative)
  SELECT gen_random_uuid(), w.id, k.kind, true
    FROM wallets w CROSS JOIN (VALUES ('available'), ('locked'), ('pending_out')) k(kind)
    WHERE w.owner_type = 'user'`.execute(db);
const renters = await db
  .selectFrom('wallets')
  .select(['id', 'owner_id'])
  .where('owner_type', '=', 'user')
  .orderBy('id')
  .execute();
for (let i = 0; i < renters.length; i += 500) {
  await postTransfers(
    db,
    renters.slice(i, i + 500).map((w) => ({
      debit: { system: 'chain_incoming' as const },
      credit: { wallet: w.id, kind: 'available' as const },
      amount: new Dec(100),
      code: 'deposit',
    })),
    ctx.state.accountIds,
  );
}
// The first session is started by the service's own path (walletFor, ratesFor, hold, session row, event); the
// rest are placed in bulk as it placed that one, 500 per transaction: the ledger's lock transfers in one
// statement, the holds with their lock records, and the session rows with the first session's frozen rates.
const first = await startSession(
  ctx,
  {
    actor: UNCHECKED_PRINCIPAL,
    userId: renters[0]!.owner_id,
    walletId: renters[0]!.id,
    providerId: provider.ownerId,
    jobId: 'bench-0',
    gpuModel: 'nvidia-geforce-rtx-4090',
    gpuCount: 1,
    requestedVramMb: 24576,
    estimatedPowerW: 450,
  },
  null,
);
const sessions: string[] = [first.session.id];
for (let i = 1; i < SESSIONS; i += 500) {
  const chunk = renters.slice(i, i + 500).map((w, j) => ({
    wallet: w,
    n: i + j,
    session: crypto.randomUUID(),
    hold: crypto.randomUUID(),
    lock: crypto.randomUUID(),
  }));
  await db.transaction().execute(async (trx) => {
    await postTransfers(
      trx,
      chunk.map((c) => ({
        debit: { wallet: c.wallet.id, kind: 'available' as const },
        credit: { wallet: c.wallet.id, kind: 'locked' as const },
        amount: first.holdAmount,
        code: 'hold',
        holdId: c.hold,
        transactionId: c.lock,
      })),
      ctx.state.accountIds,
    );
    const now = new Date();
    await trx
      .insertInto('transactions')
      .values(
        chunk.map((c) => ({
          id: c.lock,
          wallet_id: c.wallet.id,
          type: 'lock' as const,
          status: 'confirmed' as const,
          amount: first.holdAmount.toFixed(),
          hold_id: c.hold,
          reference: `session:${c.session}`,
          confirmed_at: now,
          created_at: now,
          updated_at: now,
        })),
      )
      .execute();
    await trx
      .insertInto('holds')
      .values(
        chunk.map((c) => ({
          id: c.hold,
          wallet_id: c.wallet.id,
          status: 'pending' as const,
          amount: first.holdAmount.toFixed(),
          reference: `session:${c.session}`,
        })),
      )
      .execute();
    await trx
      .insertInto('rental_sessions')
      .values(
        chunk.map((c) => ({
          ...first.session,
          id: c.session,
          user_id: c.wallet.owner_id,
          wallet_id: c.wallet.id,
          job_id: `bench-${c.n}`,
          hold_id: c.hold,
          lock_transaction_id: c.lock,
          started_at: now,
          // The first session's own, as a JSON text (the column's insert type).
          trace_context: first.session.trace_context && JSON.stringify(first.session.trace_context),
          rate_segments: null,
          created_at: now,
          updated_at: now,
        })),
      )
      .execute();
  });
  sessions.push(...chunk.map((c) => c.session));
}
await sql`ANALYZE`.execute(db);
const setupSeconds = (Date.now() - setupStarted) / 1000;
console.log(`set up in ${setupSeconds.toFixed(1)} s`);

const usageCount = async (prefix: string) =>
  Number(
    (
      await sql<{ n: string }>`SELECT count(*) AS n FROM usage_records WHERE message_id LIKE ${`${prefix}-%`}`.execute(
        db,
      )
    ).rows[0]!.n,
  );

/** CPU milliseconds each process used in a counted run. */
interface CpuUse extends CpuSnapshot {
  service: number;
  load: number;
}

interface Run {
  unique: number;
  sent: number;
  requests: number;
  errors: number;
  seconds: number;
  records: number;
  cpu: CpuUse;
  /** The 1-minute load average when the counted run started. */
  load: string;
  /** Batches (transactions) the service applied in the counted run, and the updates in them. */
  batches: { batches: number; items: number };
}

/** The usage group commit's counts so far (none before the first update). */
const batchCounts = () => {
  const { batches, items } = ctx.state.usageBatcher?.stats ?? { batches: 0, items: 0 };
  return { batches, items };
};
const batchesSince = (before: { batches: number; items: number }) => {
  const now = batchCounts();
  return { batches: now.batches - before.batches, items: now.items - before.items };
};

const serviceMs = (u: NodeJS.CpuUsage) => (u.user + u.system) / 1000;

/** Runs a load generator in its own process; `onLine` sees each line it prints before its final JSON. */
async function runClient(file: string, job: unknown, mark: string, onMark: () => void) {
  const client = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(new URL(file, import.meta.url))], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  client.stdin.end(JSON.stringify(job));
  let out = '';
  let marked = false;
  client.stdout.on('data', (chunk) => {
    out += chunk;
    if (!marked && out.includes(`${mark}\n`)) {
      marked = true;
      onMark();
    }
  });
  const [exitCode] = (await once(client, 'close')) as [number | null];
  if (exitCode !== 0 || !marked) throw new Error(`load generator ${file} exited with ${exitCode}`);
  return JSON.parse(out.slice(out.indexOf(`${mark}\n`) + mark.length + 1)) as { cpuMs: number } & Record<
    string,
    number
  >;
}

/** Runs the HTTP load generator (bench/usage-http-client.ts) with `batch` reports per request. */
async function httpLoad(batch: number, prefix: string): Promise<Run> {
  console.log(`HTTP: ${HTTP_WORKERS} connections, ${batch} report(s) per request, for ${SECONDS} s`);
  // Every CPU reading starts at the end of the warm-up (the client's `warm` line) and ends with the run.
  let service: NodeJS.CpuUsage | undefined;
  let others: CpuSnapshot | undefined;
  let load = '';
  let batches = batchCounts();
  const job = { port, sessions, seconds: SECONDS, warmupSeconds: WARMUP_SECONDS, workers: HTTP_WORKERS, batch };
  const counts = await runClient('./usage-http-client.ts', { ...job, prefix, authorization }, 'warm', () => {
    service = process.cpuUsage();
    others = cpuSnapshot(ENV_DIR);
    load = loadAverage();
    batches = batchCounts();
  });
  const cpu: CpuUse = {
    ...cpuSince(others!, cpuSnapshot(ENV_DIR)),
    service: serviceMs(process.cpuUsage(service)),
    load: counts.cpuMs,
  };
  return {
    unique: counts.unique!,
    sent: counts.sent!,
    requests: counts.requests!,
    errors: counts.errors!,
    seconds: counts.seconds!,
    cpu,
    load,
    batches: batchesSince(batches),
    records: await usageCount(prefix),
  };
}

/**
 * Sends NATS_MESSAGES reports from the NATS load generator (bench/usage-nats-client.ts) and waits for their records:
 * one per JetStream message with the daemon's token, or `perMessage` per core NATS request on subjects naming the
 * sender, no token (the consumer's `subjectIdentity`; as a daemon holding its NATS user sends them), each answered
 * once applied.
 */
async function natsLoad(prefix: string, perMessage = 0): Promise<Run> {
  const identity = perMessage > 0;
  console.log(
    `NATS: ${NATS_MESSAGES.toLocaleString('en')} reports${identity ? `, ${perMessage} a message, subjects naming the sender` : ''}`,
  );
  const subjects = 'bench.usage';
  const reportsPrefix = 'bench.usage-reports';
  const stream = `BENCH_USAGE_${Date.now()}`;
  const consumer = await startUsageConsumer({
    connection: natsConnection.connection,
    ctx,
    verifier: app.tokenVerifier,
    prefix: subjects,
    subjectIdentity: identity,
    reportsPrefix,
    logger,
    stream,
  });
  let service: NodeJS.CpuUsage | undefined;
  let others: CpuSnapshot | undefined;
  let started = 0;
  let load = '';
  let batches = batchCounts();
  const job = {
    natsUrl: testEnv.natsUrl,
    natsCredentials: testEnv.natsCredentials,
    prefix: subjects,
    reportsPrefix,
    sessions,
    messages: NATS_MESSAGES,
    idPrefix: prefix,
    ...(identity ? { identity: { owner: providerOwner, client: randomUUID() }, perMessage } : {}),
  };
  const publishing = runClient('./usage-nats-client.ts', { ...job, authorization }, 'start', () => {
    service = process.cpuUsage();
    others = cpuSnapshot(ENV_DIR);
    started = Date.now();
    load = loadAverage();
    batches = batchCounts();
  });
  let exited = false;
  publishing.then(
    () => (exited = true),
    () => (exited = true),
  );
  // Timed from the first publish until the consumer has acknowledged every message, which it does once the
  // message's transaction has committed. Progress is read from NATS (the consumer's ack floor), not by counting
  // records: a count(*) every 100 ms would load the database it measures. Requests: until the last is answered (each
  // once its reports committed).
  const jsm = await jetstreamManager(natsConnection.connection);
  const unique = Math.ceil(NATS_MESSAGES / Math.max(1, perMessage));
  const expected = unique + Math.ceil(unique / 20);
  if (identity) await publishing.catch(() => {});
  for (; !identity; ) {
    await new Promise((r) => setTimeout(r, 100));
    if (started === 0) {
      if (exited) break;
      continue;
    }
    const info = await jsm.consumers.info(stream, USAGE_CONSUMER);
    if (info.ack_floor.stream_seq >= expected && info.num_ack_pending === 0) break;
    if (Date.now() - started > 300_000) break;
  }
  const seconds = (Date.now() - started) / 1000;
  const serviceCpu = serviceMs(process.cpuUsage(service));
  const othersCpu = cpuSince(others!, cpuSnapshot(ENV_DIR));
  const natsBatches = batchesSince(batches);
  const published = await publishing;
  const records = await usageCount(prefix);
  await consumer.stop();
  await jsm.streams.delete(stream).catch(() => {});
  return {
    unique: NATS_MESSAGES,
    sent: published.sent!,
    requests: published.messages!,
    errors: 0,
    seconds,
    records,
    cpu: { ...othersCpu, service: serviceCpu, load: published.cpuMs },
    load,
    batches: natsBatches,
  };
}

/**
 * The direct replay: the statements the service sends for one batch of `size` updates (captured from a real batch
 * through Kysely's query log), sent through a bare \`pg\` pool by as many workers as the service runs batches at
 * once, each in its own transaction (BEGIN, the statements, COMMIT), for SECONDS, on other sessions and new message
 * IDs each time. What it costs is PostgreSQL's share of a batch of that size, and what the service's row costs beyond
 * it is the service's own (HTTP or NATS, validation, access, billing's plan, the driver).
 */
/** A session's place (ctid) in a replayed write, known once the batch's first statement has locked it. */
class PlaceOf {
  constructor(readonly sessionId: string) {}
}

async function directReplay(size: number, prefix: string, withSession: boolean): Promise<DirectRun> {
  const n = Math.max(1, Math.round(size));
  const pick = (k: number) => {
    const chosen = new Set<string>();
    while (chosen.size < k) chosen.add(sessions[Math.floor(Math.random() * sessions.length)]!);
    return [...chosen];
  };
  // Capture one real batch (applied and committed as the service would, through a Kysely that logs its queries).
  const queries: CompiledQuery[] = [];
  const capturing = new Kysely<BillingDB>({
    dialect: new PostgresDialect({ pool: capturePool }),
    log: (event) => {
      // The replay sends its own BEGIN and COMMIT.
      if (event.level === 'query' && !/^(begin|commit)\b/i.test(event.query.sql)) queries.push(event.query);
    },
  });
  const captured = pick(n);
  // Where the captured sessions' rows lie as the batch locks them (nothing else writes them meanwhile): the batch
  // writes each there (its ctid); the replay writes each chosen session where its own first statement found it.
  const capturedAt = new Map(
    (
      await sql<{ id: string; at: string }>`SELECT id, ctid::text AS at FROM rental_sessions
        WHERE id = ANY(${captured}::uuid[])`.execute(db)
    ).rows.map((r) => [r.at, r.id]),
  );
  const now = new Date();
  const results = await applyUsageBatch(
    { ...ctx, db: capturing },
    captured.map((sessionId, i) => ({
      // HTTP answers each update with its session: the batch reads the sessions' whole rows once written.
      withSession,
      sender: UNCHECKED_PRINCIPAL,
      sessionId,
      messageId: `${prefix}-capture-${i}`,
      timestamp: now,
      gpuUtilization: 80,
      powerDrawW: 300,
    })),
  );
  const failed = results.find((r) => r instanceof Error);
  if (failed) throw failed;
  const statements = withSession ? 3 : 2;
  if (queries.length !== statements) {
    throw new Error(`expected a batch of ${statements} statements, captured ${queries.length}`);
  }
  const recordIds = new Set(
    (
      await sql<{ id: string }>`SELECT id FROM usage_records WHERE message_id LIKE ${`${prefix}-capture-%`}`.execute(db)
    ).rows.map((r) => r.id),
  );
  let seq = 0;
  /** The captured statements with this batch's sessions, message IDs and record IDs in place of the captured ones. */
  const batchOf = () => {
    const map = new Map<string, string>();
    const chosen = pick(n);
    for (let i = 0; i < n; i++) map.set(captured[i]!, chosen[i]!);
    for (let i = 0; i < n; i++) map.set(`${prefix}-capture-${i}`, `${prefix}-${seq++}`);
    const swap = (v: unknown) => (typeof v === 'string' ? (map.get(v) ?? (recordIds.has(v) ? randomUUID() : v)) : v);
    /** In the write's ctid array: the chosen session whose place goes there, once the first statement found it. */
    const placeOf = (v: unknown) => {
      const id = typeof v === 'string' ? capturedAt.get(v) : undefined;
      return id === undefined ? swap(v) : new PlaceOf(map.get(id)!);
    };
    // Prepared as the service's pool prepares them (a text opening with PREPARED): parsed and planned once per
    // connection.
    return queries.map((q, i) => ({
      ...(q.sql.startsWith(PREPARED) ? { name: `replay_${i}_${q.sql.length}` } : {}),
      text: q.sql,
      values: q.parameters.map((p) => (Array.isArray(p) ? p.map(i === 1 ? placeOf : swap) : swap(p))),
    }));
  };
  /** Puts the places the first statement found (its rows' `at`) into the write's ctid array. */
  const place = (write: { values: unknown[] }, opened: { id: string; at: string }[]) => {
    const at = new Map(opened.map((r) => [r.id, r.at]));
    write.values = write.values.map((p) =>
      Array.isArray(p) ? p.map((v) => (v instanceof PlaceOf ? at.get(v.sessionId) : v)) : p,
    );
  };
  const pool = new pg.Pool({ connectionString: testDb.url, max: DIRECT_WORKERS });
  let applied = 0;
  const before = cpuSnapshot(ENV_DIR);
  const client = process.cpuUsage();
  const load = loadAverage();
  // PostgreSQL's CPU is read from the replay's own backends (their /proc times before and after): the server-wide
  // reading also moves when other connections (the service's pool) close during the replay.
  const conns = await Promise.all(Array.from({ length: DIRECT_WORKERS }, () => pool.connect()));
  const pids = await Promise.all(
    conns.map(async (c) => (await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid),
  );
  const backendsMs = () =>
    pids.reduce<number | null>((sum, pid) => (sum === null ? null : add(sum, processMs(pid))), 0);
  const backendsBefore = backendsMs();
  const started = Date.now();
  await Promise.all(
    conns.map(async (conn) => {
      while (Date.now() - started < SECONDS * 1000) {
        await conn.query('BEGIN');
        const [open, write, answer] = batchOf();
        place(write!, (await conn.query<{ id: string; at: string }>(open!)).rows);
        // Every session written where it was locked, as the service's batch writes it (none left to a second statement).
        const written = await conn.query(write!);
        if (written.rowCount !== n) throw new Error(`the replay wrote ${written.rowCount} of ${n} sessions`);
        if (answer) await conn.query(answer);
        await conn.query('COMMIT');
        applied += n;
      }
    }),
  );
  const seconds = (Date.now() - started) / 1000;
  const backendsAfter = backendsMs();
  for (const c of conns) c.release();
  const cpu = {
    ...cpuSince(before, cpuSnapshot(ENV_DIR)),
    postgres: backendsBefore === null || backendsAfter === null ? null : backendsAfter - backendsBefore,
    client: serviceMs(process.cpuUsage(client)),
  };
  await pool.end();
  const records = await usageCount(prefix);
  return { size: n, applied, seconds, records: records - n, cpu, load };
}

const add = (a: number, b: number | null) => (b === null ? null : a + b);

interface DirectRun {
  size: number;
  applied: number;
  seconds: number;
  records: number;
  cpu: CpuSnapshot & { client: number };
  load: string;
}

/** Runs one row, under the inspector's CPU profiler when BENCH_PROFILE names a folder. */
async function profiled<T>(name: string, run: () => Promise<T>): Promise<T> {
  if (!PROFILE_DIR) return run();
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.start');
  try {
    return await run();
  } finally {
    const { profile } = await session.post('Profiler.stop');
    writeFileSync(join(PROFILE_DIR, `${name}.cpuprofile`), JSON.stringify(profile));
    session.disconnect();
  }
}

const natsConnection = (await connectPublisher({
  url: testEnv.natsUrl,
  credentials: testEnv.natsCredentials,
  name: 'billing-bench',
})) as NatsPublisher;
const single = await profiled('http-1', () => httpLoad(1, 'http'));
const batched = await profiled(`http-${HTTP_BATCH}`, () => httpLoad(HTTP_BATCH, 'httpb'));
const nats = await profiled('nats', () => natsLoad('nats'));
const natsBatched = await profiled('nats-batched', () => natsLoad('natsb', HTTP_BATCH));

const c = await checkLedgerInvariant(db);
/** What the run left on disk, beside PostgreSQL's shared buffers (the bench sizes them: scripts/bench.sh). */
const sizes = (
  await sql<{ table: string; heap: string; indexes: string; shared: string }>`
    SELECT t AS table, pg_size_pretty(pg_table_size(t::regclass)) AS heap,
      pg_size_pretty(pg_indexes_size(t::regclass)) AS indexes, current_setting('shared_buffers') AS shared
    FROM unnest(array['rental_sessions', 'usage_records', 'holds']) AS t`.execute(db)
).rows;
const balanced = c.intact;
const meanBatch = (r: Run) => r.batches.items / Math.max(r.batches.batches, 1);
// Last: the replay writes billing onto sessions as its captured batch had it.
const directSingle = await directReplay(meanBatch(single), 'direct1', true);
const directBatched = await directReplay(meanBatch(batched), 'directb', true);
const directNats = await directReplay(meanBatch(nats), 'directn', false);
const directNatsBatched = await directReplay(meanBatch(natsBatched), 'directnb', false);
await capturePool.end();
const perUpdate = (ms: number | null, n: number) => (ms === null ? '?' : (ms / Math.max(n, 1)).toFixed(3));
const met = (rate: number, target: number) => (rate >= target ? 'met' : 'NOT met');
const row = (what: string, r: Run, target: number, requests: boolean) => {
  const rate = r.unique / r.seconds;
  const u = r.unique;
  const { cpu } = r;
  return (
    `| ${what} | ${Math.round(rate)} (≥ ${target.toLocaleString('en')}: ${met(rate, target)}) | ` +
    `${requests ? Math.round(r.requests / r.seconds) : '—'} | ${r.unique} | ${r.sent} | ${r.records} | ` +
    `${requests ? r.errors : '—'} | ${perUpdate(cpu.service, u)} | ${perUpdate(cpu.load, u)} | ` +
    `${perUpdate(cpu.postgres, u)} | ${perUpdate(cpu.nats, u)} | ${perUpdate(cpu.machine, u)} | ` +
    `${cpu.machine === null ? '?' : (cpu.machine / 1000 / r.seconds).toFixed(2)} | ${r.load} |`
  );
};
/** A path's service row `r` beside its direct replay `d`. */
const directRow = (what: string, r: Run, d: DirectRun) => {
  const rate = d.applied / d.seconds;
  const service = r.unique / r.seconds;
  const perU = (ms: number | null) => perUpdate(ms, d.applied);
  const machineService = r.cpu.machine === null ? null : r.cpu.machine / Math.max(r.unique, 1);
  const machineDirect = d.cpu.machine === null ? null : d.cpu.machine / Math.max(d.applied, 1);
  const share =
    machineService === null || machineDirect === null
      ? '?'
      : `${(100 * (1 - machineDirect / machineService)).toFixed(0)} %`;
  return (
    `| ${what} | ${fmtBatch(meanBatch(r))} (${d.size}) | ${Math.round(rate)} | ${perU(d.cpu.client)} | ` +
    `${perU(d.cpu.postgres)} | ${perU(d.cpu.machine)} | ${Math.round(service)} | ${(service / rate).toFixed(2)}x | ` +
    `${perUpdate(r.cpu.postgres, r.unique)} | ${perUpdate(r.cpu.machine, r.unique)} | ${share} | ` +
    `${d.records === d.applied ? 'yes' : '**NO**'} | ${d.load} |`
  );
};
const fmtBatch = (x: number) => x.toFixed(1);
const exactlyOnce =
  single.records === single.unique &&
  batched.records === batched.unique &&
  nats.records === NATS_MESSAGES &&
  natsBatched.records === NATS_MESSAGES;

const md = `## billing-usage

${machineLine()}

Usage updates applied per second with ${SESSIONS.toLocaleString('en')} active sessions (each update: lock the session,
de-duplicate by message ID, bill elapsed full minutes, check the hold, update power, insert the usage record; updates
that arrive together share one database transaction: group commit, see the service README); the sessions were
set up in ${setupSeconds.toFixed(0)} s (the first started through the service, the rest placed in bulk as it placed that one).
HTTP: ${HTTP_WORKERS} keep-alive connections (closed loop) against the listening service for ${SECONDS} s, after
${WARMUP_SECONDS} s of the same load left uncounted (JIT warm-up; its CPU is not counted either), from a load
generator that is a separate Node process on the same machine; first one report per request
(\`POST /usage-update\`), then ${HTTP_BATCH} reports per request (\`POST /usage-updates\`, a daemon reporting the
${HTTP_BATCH} rentals of an ${HTTP_BATCH}-GPU machine). NATS: ${NATS_MESSAGES.toLocaleString('en')} JetStream publishes
from a publisher in a separate Node process, consumed by the service's durable consumer (up to 512 in hand), timed
from the first publish until every message is acknowledged (after its transaction commits); first one report per
message with the daemon's token, then ${HTTP_BATCH} reports per core NATS request (\`{reports: [...]}\`, no stream) on
subjects that name their sender (\`<usage_reports>.<owner ID>.<client ID>.<machine>\`, no token: billing's
\`subject_identity\`, as a daemon holding the NATS user auth issues it sends them, each answered once applied; the
requests column counts its requests). One request or message in 20 is
sent twice (a retry). Load generator,
service, PostgreSQL (fsync off, \`shared_buffers\` ${sizes[0]!.shared}) and NATS share the machine's ${os.cpus().length} cores; on
disk after the run: ${sizes.map((z) => `\`${z.table}\` ${z.heap} + ${z.indexes} of indexes`).join(', ')}.
CPU columns: milliseconds of CPU per unique update in the counted run, by process (load = the load generator;
machine = every process on the machine, other users included); cores busy = the machine's CPU seconds per second.

| path | updates/s (target) | requests/s | unique updates | updates sent | usage records | errors | CPU ms/update: service | load | PostgreSQL | NATS | machine | cores busy | load average at start |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
${row('HTTP, 1 report per request', single, TARGET_SINGLE, true)}
${row(`HTTP, ${HTTP_BATCH} reports per request`, batched, TARGET_BATCHED, true)}
${row('NATS', nats, TARGET_BATCHED, false)}
${row(`NATS, ${HTTP_BATCH} reports per request on subjects naming the sender (no token, no stream)`, natsBatched, TARGET_FLEET, true)}

Direct replay, same run: the statements the service sends for a batch of the row's mean size (its updates over its
transactions in the counted run), captured from a real batch and sent through a bare \`pg\` pool by
${DIRECT_WORKERS} workers (the batches the service runs at once) for ${SECONDS} s, BEGIN and COMMIT included, on other
sessions and new message IDs each time, from the benchmark's process. Machine CPU per update: the replay's against
the service row's (the replay's PostgreSQL CPU is its own backends'); the service's share is the part of the row's
machine CPU the replay does not spend (HTTP or NATS,
validation, access, billing's plan, the driver, the load generator).

| path | mean batch (replayed) | direct updates/s | CPU ms/update: pg client | PostgreSQL | machine | service updates/s | service / direct | service row's CPU ms/update: PostgreSQL | machine | service's share | one record each | load average at start |
|---|---|---|---|---|---|---|---|---|---|---|---|---|
${directRow('HTTP, 1 report per request', single, directSingle)}
${directRow(`HTTP, ${HTTP_BATCH} reports per request`, batched, directBatched)}
${directRow('NATS', nats, directNats)}
${directRow(`NATS, ${HTTP_BATCH} reports per request`, natsBatched, directNatsBatched)}

Exactly once: ${exactlyOnce ? '**yes**' : '**NO**'} (usage records = unique updates). Ledger afterwards:
${balanced ? '**balanced**' : '**BROKEN**'} (${c.badBalance} balance mismatches, ${c.negative} negative, accounts sum to
${c.total}, ${c.lockedMismatch} hold mismatches).
`;
writeBenchSection('billing-usage', md);
await natsConnection.close();
await app.close();
await database.close();
await testDb.drop();
await issuer.close();
const directOnce = [directSingle, directBatched, directNats, directNatsBatched].every((d) => d.records === d.applied);
if (!balanced || !exactlyOnce || !directOnce || single.errors + batched.errors > 0) process.exit(1);
